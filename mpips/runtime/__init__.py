"""The runtime: the roles (worker, server, group server, evaluator), the
checkpoint protocol and the layout, written once over a transport: MPI
one-sided windows (mpi_transport.py, an `mpirun` job: job.py) or in-process
arrays under a virtual clock (local_transport.py, `mpips simulate`:
simulate.py). Paradigms decide (mpips/paradigms/); this package does."""
