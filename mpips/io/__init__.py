"""What goes to disk: the run log (HDF5, one reader) and checkpoint files."""
