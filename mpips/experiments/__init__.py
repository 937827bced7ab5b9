"""Setting up experiments: emulated heterogeneity and device time, starting
`mpiexec` jobs from Python, and Sync-Switch's search for its switch point."""
