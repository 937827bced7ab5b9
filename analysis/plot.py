"""`python analysis/plot.py RUN... -o DIR`: kept for existing commands; the code
is `mpips.analysis.plot` (`mpips plot`)."""
import sys

from mpips.analysis.plot import *  # noqa: F401,F403
from mpips.analysis.plot import main

if __name__ == "__main__":
    sys.exit(main())
