import os

import pytest

# One torch thread per process: tests share two cores with MPI ranks.
os.environ.setdefault("OMP_NUM_THREADS", "1")


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
