"""Every bad input is one `mpips: error:` line and exit 2, on every rank
together, whichever rank or role would have found it: the whole command
line (`mpips.cli.main`) under mpiexec -n 4 (1 server + 3 workers), one
launch for all cases. A case that escaped would abort the job (MPI_ABORT)."""
from __future__ import annotations

import os
import shutil
import struct
import tempfile

import pytest
from mpi4py import MPI

from mpips import cli

comm = MPI.COMM_WORLD


def _idx(path, magic, dims, payload=b""):
    with open(path, "wb") as fh:
        fh.write(struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in dims) + payload)


def _mnist(folder, train_images, image_size=28, test_payload=None):
    """IDX files with `train_images` training images of image_size^2 pixels
    (and 4 test images, or `test_payload` as their bytes: short of 4 images
    when it is shorter)."""
    os.makedirs(folder)
    px = image_size * image_size
    _idx(os.path.join(folder, "train-images-idx3-ubyte"), 0x0803, (train_images, image_size, image_size),
         bytes(train_images * px))
    _idx(os.path.join(folder, "train-labels-idx1-ubyte"), 0x0801, (train_images,), bytes(train_images))
    _idx(os.path.join(folder, "t10k-images-idx3-ubyte"), 0x0803, (4, image_size, image_size),
         bytes(4 * px) if test_payload is None else test_payload)
    _idx(os.path.join(folder, "t10k-labels-idx1-ubyte"), 0x0801, (4,), bytes(4))


@pytest.fixture(scope="module")
def shared():
    """A directory every rank sees, with the input files of the cases."""
    top = comm.bcast(tempfile.mkdtemp(prefix="mpips-bad-") if comm.Get_rank() == 0 else None)
    if comm.Get_rank() == 0:
        _mnist(os.path.join(top, "mnist-empty"), 0)
        _mnist(os.path.join(top, "mnist-0x0"), 8, image_size=0)
        _mnist(os.path.join(top, "mnist-truncated"), 10, test_payload=bytes(100))
        with open(os.path.join(top, "bool.yaml"), "w") as fh:
            fh.write("batch_size: true\n")
    comm.Barrier()
    yield top
    comm.Barrier()
    if comm.Get_rank() == 0:
        shutil.rmtree(top, ignore_errors=True)


CASES = [  # (id, flags, the field the line names, what it says is allowed)
    ("slowdown of the wrong length", ["--slowdown", "1,2"], "slowdown", "2 factors for 3 workers"),
    ("malformed straggler", ["--straggler", "1:2"], "straggler", "worker:start_iter:iters:factor"),
    ("straggler of no worker", ["--straggler", "7:2:3:4"], "straggler", "worker in 0..2"),
    ("malformed random stragglers", ["--random-stragglers", "0.1:20"], "random_stragglers", "rate:mean_iters:factor"),
    ("endless random stragglers", ["--random-stragglers", "0.1:inf:2"], "random_stragglers", "finite"),
    ("malformed nan_at", ["--nan-at", "x"], "nan_at", "worker:iteration"),
    ("malformed fail_at", ["--fail-at", "1"], "fail_at", "worker:iteration"),
    ("fail_at of no worker", ["--fail-at", "5:1"], "fail_at", "worker in 0..2"),
    ("vsgd lambda nan", ["--paradigm", "vsgd", "--vsgd-rule", "linear", "--vsgd-lambda", "nan"],
     "vsgd_lambda", "finite"),
    ("weight decay nan", ["--weight-decay", "nan"], "weight_decay", "finite"),
    ("seed beyond 64 bits", ["--seed", str(2**64)], "seed", "[-2**63, 2**64)"),
    ("tiny stall timeout", ["--stall-timeout", "1e-6"], "stall_timeout", ">= 1"),
    ("model without trainable parameters", ["--model", "faulty_models:frozen"], "model",
     "no trainable parameters"),
    ("model function of the wrong signature", ["--model", "faulty_models:one_argument"], "model",
     "one_argument(input_shape, num_classes) failed: TypeError"),
    ("model with fewer classes than the labels", ["--model", "faulty_models:five_classes"], "model",
     "needs (batch, 10)"),
    # a factory that builds another model on rank 2: each rank would size its one-sided
    # offsets from its own count (loss 7.7e14, accuracy 0.8%, "finished" before)
    ("a rank with another model", ["--model", "faulty_models:by_rank"], "ranks disagree on the model",
     "rank(s) 2 (1810 parameters against rank 0's 1210)"),
    ("mnist without images", ["--dataset", "mnist", "--data-dir", "{shared}/mnist-empty"],
     "train-images-idx3-ubyte", "holds 0 images"),
    ("mnist of 0x0 images", ["--dataset", "mnist", "--data-dir", "{shared}/mnist-0x0"],
     "train-images-idx3-ubyte", "of 0x0 pixels"),
    ("run dir not writable", ["--run-dir", "/proc"], "run_dir", "cannot write there"),
    ("huge synthetic dataset", ["--dataset", "synthetic", "--synthetic-samples", "1000000000"],
     "synthetic_samples", "10000000"),
    ("boolean batch size in YAML", ["--config", "{shared}/bool.yaml"], "batch_size", "not a boolean"),
    ("more groups than workers", ["--paradigm", "gssp", "--groups", "9"], "groups", "at most 1"),
    ("batch beyond a worker's share of an epoch", ["--budget", "per-worker", "--batch-size", "500"],
     "batch_size", "must be <= 479"),
    # These were one mpiexec job each in tests/mpi (test_robustness.py,
    # test_gssp_job.py, test_lbbsp.py), 10-20 s of start-up apiece for a
    # check of one line; here they are the same claims, on every rank, in the
    # one launch. (The job-level path, mpiexec's own exit status 2 for
    # `python -m mpips`, keeps one case in test_robustness.py.)
    ("unknown paradigm", ["--paradigm", "bogus"], "paradigm", "allowed: bsp, asp, ssp"),
    ("negative staleness", ["--staleness", "-1"], "staleness", "integer >= 0"),
    ("more servers than ranks", ["--servers", "5"], "servers", "must be <"),
    ("zero workers", ["--servers", "4"], "servers", "must be <"),
    ("workers mismatch", ["--workers", "5"], "workers", "must equal"),
    ("missing data dir", ["--dataset", "mnist", "--data-dir", "/nonexistent/mnist"], "data_dir",
     "no such directory"),
    ("malformed mnist", ["--dataset", "mnist", "--data-dir", "{shared}/mnist-truncated"],
     "t10k-images-idx3-ubyte", ""),
    ("bad slowdown", ["--slowdown", "1,x"], "slowdown", "factors"),
    ("not a number", ["--lr", "fast"], "lr", "float"),
    # GSSP layouts: 4 ranks with 2 groups leave 1 worker; one group that leaves out worker 1
    ("gssp groups beyond the workers", ["--paradigm", "gssp", "--groups", "2"], "groups", "invalid groups="),
    ("gssp assignment missing a worker", ["--paradigm", "gssp", "--groups", "1", "--group-assignment", "0"],
     "group_assignment", "invalid group_assignment="),
    # LB-BSP: X = 1 over 3 workers, two of them would get no sample
    ("infeasible lbbsp global batch", ["--paradigm", "lbbsp", "--global-batch", "1"], "global_batch=1",
     "number of workers (3)"),
]


@pytest.mark.mpi(min_size=4)
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_exit_2_on_every_rank(case, shared, capsys):
    if comm.Get_size() != 4:
        pytest.skip("written for 4 ranks")
    _, flags, field, allowed = case
    run_dir = os.path.join(shared, "run")
    flags = [f.replace("{shared}", shared) for f in flags]
    if "--run-dir" not in flags:
        flags = ["--run-dir", run_dir, *flags]
    code = cli.main(["train", *flags])
    out, err = capsys.readouterr()
    assert comm.allgather(code) == [2] * 4
    assert "Traceback" not in out + err
    errors = [line for line in err.splitlines() if line.startswith("mpips: error:")]
    if comm.Get_rank() == 0:
        assert len(errors) == 1, err
        assert f"invalid {field}" in errors[0] or field in errors[0], errors[0]
        assert allowed in errors[0], errors[0]
    else:
        assert errors == [], err
    assert not os.path.exists(run_dir)   # nothing started: no run directory left behind
    comm.Barrier()


@pytest.mark.mpi(min_size=4)
def test_data_of_another_shape_on_one_rank_is_refused_on_every_rank(shared):
    """mpips.train with data that depend on the rank: SetupError on every rank, naming it."""
    import numpy as np

    import mpips
    from mpips.runtime.job.train import SetupError

    if comm.Get_size() != 4:
        pytest.skip("written for 4 ranks")
    width = 7 if comm.Get_rank() == 1 else 6
    x = np.random.default_rng(0).normal(size=(40, width)).astype(np.float32)
    y = np.arange(40) % 4
    run_dir = os.path.join(shared, "by-rank")
    with pytest.raises(SetupError, match=r"ranks disagree on the data.s shapes .*rank\(s\) 1 \(\[\(32, 7\)"):
        mpips.train(epochs=1, dataset=(x[:32], y[:32], x[32:], y[32:]), run_dir=run_dir)
    assert not os.path.exists(run_dir)
    comm.Barrier()
