"""Post-hoc analysis of run logs, on pandas DataFrames: `summarize` (tables,
`mpips summarize`) and `plot` (figures, `mpips plot`)."""
