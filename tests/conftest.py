import os
import signal
import time
import uuid

import pytest

# One torch thread per process: tests share two cores with MPI ranks.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# Every process a test starts (and theirs: mpiexec's ranks, a plan's pool, a
# Slurm job) carries this in its environment; none may be left when the session
# ends (no_process_left).
SESSION = "MPIPS_TEST_SESSION"
os.environ[SESSION] = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"


def processes_of_this_session() -> dict[int, str]:
    """{pid: command line} of the processes whose environment holds this
    session's mark, this process aside."""
    mark = f"{SESSION}={os.environ[SESSION]}".encode()
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                if mark not in fh.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                command = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:   # gone meanwhile, or not ours to read
            continue
        # (a zombie has none: ended, its parent not yet told; multiprocessing's
        # resource tracker, a pool's in this process, ends with this process)
        if command and "multiprocessing.resource_tracker" not in command:
            found[int(entry)] = command
    return found


@pytest.fixture(scope="session", autouse=True)
def no_process_left():
    """After the last test, no process the tests started is still running
    (SIGTERM to `mpips plan` left its pool's processes, 270 MB each, alive
    for good): those still there after 15 s are named, killed, and fail
    the session."""
    yield
    deadline = time.monotonic() + 15
    while (left := processes_of_this_session()) and time.monotonic() < deadline:
        time.sleep(0.5)
    # the ranks first, then (given a moment) their launchers: an mpiexec killed
    # before its ranks leaves its session directory /tmp/ompi.PID behind
    launchers = [pid for pid, command in left.items() if command.split()[0].endswith(("prterun", "mpiexec"))]
    for pids in ([pid for pid in left if pid not in launchers], launchers):
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(2 if pids else 0)
    assert not left, "processes left by the tests (killed now):\n" + "\n".join(
        f"  {pid}: {command[:300]}" for pid, command in sorted(left.items()))


@pytest.fixture
def user_package(tmp_path, monkeypatch):
    """write(module, source): a module of a user's package in tmp_path, first on
    the module search path; returns its name, `package.module`. A fresh package
    name per test (tmp_path's name is unique), so no test finds another test's
    package cached in sys.modules."""
    package = f"userpkg_{tmp_path.name}"

    def write(module: str, source: str) -> str:
        (tmp_path / package).mkdir(exist_ok=True)
        (tmp_path / package / "__init__.py").write_text("")
        (tmp_path / package / f"{module}.py").write_text(source)
        monkeypatch.syspath_prepend(str(tmp_path))
        return f"{package}.{module}"

    return write


@pytest.fixture
def srun_on_path(tmp_path, monkeypatch):
    """A program named srun first on PATH: a launcher is refused unless it can be started."""
    srun = tmp_path / "bin" / "srun"
    srun.parent.mkdir()
    srun.write_text("#!/bin/sh\n")
    srun.chmod(0o755)
    monkeypatch.setenv("PATH", f"{srun.parent}{os.pathsep}{os.environ.get('PATH', '')}")


@pytest.fixture
def read_only_folder(tmp_path):
    """A folder no file can be made in: for root, who writes anywhere, a
    read-only tmpfs mounted for the test (skipped where mounting is not
    permitted); for anyone else, a folder without write permission."""
    import subprocess

    folder = tmp_path / "read-only"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,ro", "tmpfs", str(folder)],
                       capture_output=True, text=True)
    if p.returncode:
        pytest.skip(f"mounting a read-only tmpfs is not permitted here: {p.stderr.strip()}")
    yield folder
    subprocess.run(["umount", "--lazy", str(folder)], check=True)
