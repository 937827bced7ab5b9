"""How bytes move and time passes: the protocols the roles use, MPI one-sided windows, the in-process transport under the simulator's virtual-time scheduler, and waiting."""
