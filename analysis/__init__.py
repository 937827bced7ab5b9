"""Kept for existing commands and imports: the analysis is `mpips.analysis`."""
