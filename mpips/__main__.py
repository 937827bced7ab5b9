import sys

from .runtime.recovery import preemption

preemption.remember()   # before the slow imports: a preemption during start-up is not lost

from .cli import main  # noqa: E402

sys.exit(main())
