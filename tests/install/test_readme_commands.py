"""Every command that README.md and the pages of docs/ show in a ```sh block, run
as a person would: in a new shell (no virtual environment active, nothing
exported, PATH the system's), after only what the quick start says to do first
(its block that activates .venv), each in its own shell, in the order shown,
in a scratch directory that holds the repository's .venv, examples/ and jobs/.
Each must exit 0; one whose comment states an accuracy (`>= 90%`) must have
trained its `--run-dir` to it. A command that cannot run here is in NOT_RUN
with the reason, and a command added to a page is run, or fails this test
until it is listed there.

It needs .venv (`make install`). A test per page, each command's time printed:
`make test-install` (the suite, CI) runs README.md's (about 4 minutes on 2
idle cores), `make test-docs` the pages of docs/ (about 12 more: their
examples train GSSP, LeNet-5 and 256 simulated workers to the accuracies they
state, which the suite's 20 minutes cannot hold).
"""
from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from mpips.io.log import RunLog

ROOT = Path(__file__).resolve().parents[2]
PAGES = ["README.md", "docs/guide.md", "docs/troubleshooting.md"]
# The quick start's block run before every command (activation and Open MPI's exports).
SETUP_MARK = ". .venv/bin/activate"
NOT_RUN = {
    "make demo": "installs .venv and trains for 2 minutes; its train, info and plot are the quick start's "
                 "own commands, run here",
    "make test": "the whole suite, this test included",
    "sbatch jobs/gssp.slurm": "needs a Slurm cluster: tests/slurm runs the job scripts on one it starts",
    "MPIPS_EPOCHS=2 MPIPS_SLOWDOWN=1,1,2,4 sbatch jobs/ssp.slurm": "needs a Slurm cluster (tests/slurm)",
    "sbatch -N 2 -n 9 jobs/bsp.slurm": "needs a Slurm cluster of two nodes",
    "mpirun --hostfile hosts --bind-to none -n 9 mpips train --paradigm bsp --servers 2 --workers 7":
        "needs the hosts of a hostfile",
}
ACCURACY = re.compile(r">=\s*(\d+(?:\.\d+)?)%")
RUN_DIR = re.compile(r"--run-dir\s+(\S+)")


def shown_commands(page: str) -> list[tuple[str, float | None]]:
    """The commands of a page's ```sh blocks (continued lines joined), each
    with the accuracy its comment states (None: none)."""
    text = (ROOT / page).read_text()
    commands = []
    for block in re.findall(r"^```sh\n(.*?)^```", text, flags=re.S | re.M):
        joined = re.sub(r"\\\n\s*", "", block)
        for line in joined.splitlines():
            parts = re.split(r"\s+#\s", " " + line.strip(), maxsplit=1)
            command, comment = parts[0].strip(), parts[1] if len(parts) > 1 else ""
            if not command:
                continue
            found = ACCURACY.search(comment)
            commands.append((command, float(found.group(1)) / 100 if found else None))
    return commands


def quick_start_setup() -> str:
    """The README's block that activates .venv: what every command's shell does first."""
    for block in re.findall(r"^```sh\n(.*?)^```", (ROOT / "README.md").read_text(), flags=re.S | re.M):
        if SETUP_MARK in block:
            return block
    raise AssertionError(f"README.md has no ```sh block with {SETUP_MARK!r}")


def every_command(pages=PAGES) -> list[tuple[str, str, float | None]]:
    setup = {line.split("#")[0].strip() for line in quick_start_setup().splitlines()}
    return [(page, command, accuracy) for page in pages for command, accuracy in shown_commands(page)
            if command not in setup]


def fresh_shell(command: str, cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    env = {"HOME": os.environ.get("HOME", "/root"), "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
           "LANG": "C.UTF-8", "TERM": "dumb", "USER": os.environ.get("USER", "root")}
    if "MPIPS_CACHE" in os.environ:
        env["MPIPS_CACHE"] = os.environ["MPIPS_CACHE"]
    script = quick_start_setup() + "\n" + command + "\n"
    return subprocess.run(["bash", "--noprofile", "--norc", "-e", "-c", script], cwd=cwd, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)


def test_every_page_command_is_run_or_named_as_not_run():
    shown = {command for _, command, _ in every_command()}
    unknown = sorted(set(NOT_RUN) - shown)
    assert not unknown, f"NOT_RUN names commands no page shows: {unknown}"


@pytest.mark.skipif(not (ROOT / ".venv" / "bin" / "activate").exists(), reason="needs .venv (make install)")
@pytest.mark.parametrize("page", PAGES, ids=lambda page: Path(page).stem)
def test_every_command_of_a_page_in_a_fresh_shell(page, tmp_path):
    for name in (".venv", "examples", "jobs"):
        (tmp_path / name).symlink_to(ROOT / name)
    started, failed = time.monotonic(), []
    for _, command, accuracy in every_command([page]):
        if command in NOT_RUN:
            print(f"[  not run ] {page}: {command}  ({NOT_RUN[command]})")
            continue
        t = time.monotonic()
        p = fresh_shell(command, tmp_path, timeout=600)
        took = time.monotonic() - t
        verdict = f"exit {p.returncode}"
        if p.returncode == 0 and accuracy is not None:
            run_dir = RUN_DIR.search(command)
            assert run_dir, f"{page}: `{command}` states an accuracy but names no --run-dir"
            final = float(RunLog(str(tmp_path / run_dir.group(1))).evaluations["accuracy"][-1])
            verdict += f", final accuracy {100 * final:.1f}% (stated >= {100 * accuracy:g}%)"
            if final < accuracy:
                failed.append(f"{page}: `{command}`: {verdict}")
        elif p.returncode != 0:
            failed.append(f"{page}: `{command}`: {verdict}\n{p.stdout[-3000:]}")
        print(f"[{took:7.1f} s] {page}: {command}: {verdict}")
    print(f"all commands of {page}: {time.monotonic() - started:.0f} s")
    assert not failed, "\n\n".join(failed)
