import os

# One torch thread per process: tests share two cores with MPI ranks.
os.environ.setdefault("OMP_NUM_THREADS", "1")
