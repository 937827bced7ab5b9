"""A user's function (--dataset, --model) in a whole `mpips simulate`: what
it raises is a failure naming it (a SystemExit(0) in a dataset function made
`mpips simulate` exit 0 with no run), and a stop signal that comes while it
runs keeps its status (143, 130, 138: it was exit 2, "invalid dataset=...",
from an `except Exception` around the call)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from mpips.cli import main

DATA = """
import time

def exits():
    raise SystemExit(0)

def slow(started):
    open(started, "w").close()
    time.sleep(120)
"""


def test_systemexit_in_a_dataset_function_is_a_failure_naming_it(user_package, tmp_path, capsys):
    module = user_package("data", DATA)
    assert main(["simulate", "--workers", "2", "--dataset", f"{module}:exits",
                 "--run-dir", str(tmp_path / "run")]) == 2
    assert capsys.readouterr().err == f"mpips: error: invalid dataset='{module}:exits': exits() failed: SystemExit: 0\n"
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT, signal.SIGUSR1])
def test_a_stop_signal_during_a_users_function_keeps_its_status(tmp_path, stop):
    package = tmp_path / "userdata"
    package.mkdir()
    (package / "__init__.py").write_text("")
    started = tmp_path / "started"
    (package / "sets.py").write_text(DATA + f"\ndef waits():\n    slow({str(started)!r})\n")
    p = subprocess.Popen([sys.executable, "-m", "mpips", "simulate", "--workers", "2", "--dataset",
                          "userdata.sets:waits", "--run-dir", str(tmp_path / "run")],
                         cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(tmp_path)},
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while not started.exists():
            assert p.poll() is None and time.monotonic() < deadline, p.communicate()[0]
            time.sleep(0.1)
        p.send_signal(stop)
        output = p.communicate(timeout=60)[0]
    finally:
        p.kill()
    assert p.returncode == 128 + stop, output
    assert f"the simulation stopped on {stop.name}" in output and "invalid dataset" not in output
