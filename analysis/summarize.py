"""`python analysis/summarize.py RUN...`: kept for existing commands; the code
is `mpips.analysis.summarize` (`mpips summarize`)."""
import sys

from mpips.analysis.summarize import *  # noqa: F401,F403
from mpips.analysis.summarize import main

if __name__ == "__main__":
    sys.exit(main())
