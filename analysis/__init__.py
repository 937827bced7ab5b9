"""Post-hoc analysis of run logs: `summarize.py` (tables) and `plot.py` (figures)."""
