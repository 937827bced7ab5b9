"""Running experiments: `mpiexec` jobs from Python, `mpips compare` (a run per
seed and paradigm, then one table), and Sync-Switch's search for its switch
point."""
