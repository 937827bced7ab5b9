"""The configuration page and the log schema document stay complete; the README starts with its quick start;
the documents name only files of the repository and flags that exist."""
import argparse
import os
import re
import subprocess
import sys

import pytest

from mpips.config import SHARED
from mpips.io.log import TABLES

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))


def read(name):
    with open(os.path.join(ROOT, name)) as fh:
        return fh.read()


def test_the_configuration_page_documents_every_setting():
    from mpips.paradigms import option_specs

    page = read("docs/configuration.md")
    names = [*SHARED, *(name for own in option_specs().values() for name in own)]
    missing = [name for name in dict.fromkeys(names) if f"| `{name}` |" not in page]
    assert not missing, f"docs/configuration.md's table lacks {missing}"


def test_readme_starts_with_the_two_commands_and_the_activation():
    # the first screen (40 lines): the quick start, whose commands a new shell can run
    first_screen = "\n".join(read("README.md").splitlines()[:40])
    for shown in ("make demo", "make test", ". .venv/bin/activate", "mpirun -n 5 mpips train"):
        assert shown in first_screen, shown
    assert first_screen.index("make demo") < first_screen.index("make test") < first_screen.index(". .venv/bin/activate")


def test_the_citation_file_names_this_version():
    import mpips

    assert f"version: {mpips.__version__}" in read("CITATION.cff")


def test_log_schema_documents_every_column():
    doc = read("docs/log-schema.md")
    missing = [f"{t}.{c}" for t, dt in TABLES.items() for c in dt.names if f"| `{c}` |" not in doc]
    assert not missing, f"docs/log-schema.md lacks {missing}"


# Joined at run time so that this file (and its compiled form: Python folds
# "a" + "b") does not name them itself.
OUTSIDE = tuple("".join(parts) for parts in (("PARADIGMS", ".md"), ("ENVIRONMENT", ".md"),
                                             ("DESIGN", ".md"), ("..", "/shared")))
NOT_TEXT = (".json", ".csv", ".png", ".h5")


def tracked_files():
    """The repository's files as git knows them (tracked, and new ones not ignored)."""
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
                             cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return sorted({p for p in out.decode().split("\0") if p})


def test_no_file_points_outside_the_repository():
    # A user has only the repository: the rules and environment notes it
    # cites must be in it (docs/paradigms.md, docs/environment.md).
    found = []
    for name in tracked_files():
        path = os.path.join(ROOT, name)
        if name.endswith(NOT_TEXT) or not os.path.isfile(path):
            continue
        with open(path, "rb") as fh:
            data = fh.read()
        if b"\0" in data:
            continue   # binary
        text = data.decode("utf-8", errors="replace")
        for lineno, line in enumerate(text.splitlines(), 1):
            found += [f"{name}:{lineno}: {ref}" for ref in OUTSIDE if ref in line]
    assert not found, "files outside the repository named:\n" + "\n".join(found)


def test_readme_names_only_docs_that_exist():
    readme = read("README.md")
    named = set(re.findall(r"docs/[\w.-]+\.md", readme))
    assert {"docs/paradigms.md", "docs/environment.md"} <= named
    missing = sorted(p for p in named if not os.path.isfile(os.path.join(ROOT, p)))
    assert not missing, f"README.md names {missing}, which do not exist"


def test_docs_name_only_flags_that_exist():
    # Every --flag the documents name is one of `mpips`'s (train's come from
    # Config's fields, so a renamed setting shows up here).
    from mpips.cli import parser

    flags = set()
    parsers = [parser()]
    while parsers:
        p = parsers.pop()
        for action in p._actions:
            flags.update(s for s in action.option_strings if s.startswith("--"))
            if isinstance(action, argparse._SubParsersAction):
                parsers += action.choices.values()
    # summarize, plot, export: programs of their own (cli.DELEGATED), their flags in their source
    from mpips.cli import DELEGATED

    for module, _ in DELEGATED.values():
        source = read(module.replace(".", "/") + ".py")
        flags.update(re.findall(r"add_argument\((?:\"-\w\", )?\"(--[a-z][a-z0-9-]*)\"", source))
    for doc in ("docs/paradigms.md", "docs/environment.md", "docs/guide.md", "docs/troubleshooting.md",
                "README.md"):
        named = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", read(doc)))
        # mpirun's, pytest's and Slurm's options, in environment.md's commands
        named -= {"--bind-to", "--mpi", "--with-mpi", "--timeout", "--timeout-method",
                  "--ignore", "--parsable", "--signal", "--wait", "--ntasks", "--hostfile", "--requeue",
                  "--gpus-per-node", "--logdir", "--batch"}
        # the settings a plugin paradigm declares in the document's own example (its Options)
        named -= {"--" + name.replace("_", "-") for block in re.findall(r"```python\n(.*?)```", read(doc), re.S)
                  for name in re.findall(r"^\s+(\w+): \w+ = setting\(", block, re.M)}
        unknown = sorted(named - flags)
        assert not unknown, f"{doc} names flags mpips does not have: {unknown}"


def table_rows(text: str) -> list[list[tuple[int, int]]]:
    """Each Markdown table of `text` as (line number, cells) per row; a `|` inside
    backticks or escaped is not a cell border."""
    tables, current = [], []
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.startswith("|"):
            bare = re.sub(r"`[^`]*`", "``", line.replace("\\|", ""))
            current.append((lineno, bare.strip().strip("|").count("|") + 1))
        elif current:
            tables.append(current)
            current = []
    return tables + ([current] if current else [])


def test_every_table_has_as_many_cells_per_row_as_its_header():
    bad = []
    for doc in ["README.md", "benchmarks/README.md", *(f"docs/{n}" for n in os.listdir(os.path.join(ROOT, "docs")))]:
        for table in table_rows(read(doc)):
            header = table[0][1]
            bad += [f"{doc}:{lineno}: {cells} cells, header {header}" for lineno, cells in table if cells != header]
    assert not bad, "\n".join(bad)


def test_readme_results_are_generated_from_the_results_files():
    p = subprocess.run([sys.executable, "readme_results.py", "--check"], cwd=os.path.join(ROOT, "benchmarks"),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert p.returncode == 0, p.stdout


def test_the_conda_environment_lists_every_dependency():
    import configparser

    import yaml

    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(ROOT, "setup.cfg"))
    needed = {re.split(r"[<>=!\s]", line.strip())[0] for key in ("install_requires",)
              for line in cfg["options"][key].splitlines() if line.strip()}
    needed |= {re.split(r"[<>=!\s]", line.strip())[0]
               for line in cfg["options.extras_require"]["test"].splitlines() if line.strip()}
    with open(os.path.join(ROOT, "environment.yml")) as fh:
        dependencies = yaml.safe_load(fh)["dependencies"]
    from_pip = [d for entry in dependencies if isinstance(entry, dict) for d in entry.get("pip", [])]
    listed = {re.split(r"[<>=!\s]", d)[0] for d in dependencies + from_pip if isinstance(d, str)}
    assert "pytorch" in listed   # torch, which setup.cfg leaves to the user (pinned first)
    missing = sorted(needed - listed)
    assert not missing, f"environment.yml lacks {missing} (setup.cfg's dependencies)"


def test_the_paradigms_settings_table_is_made_from_their_options():
    from mpips.paradigms import options_markdown

    doc = read("docs/paradigms.md")
    start, end = "<!-- generated: options_markdown -->\n", "<!-- end generated -->"
    assert doc[doc.index(start) + len(start):doc.index(end)] == options_markdown(), \
        "docs/paradigms.md's settings table is stale: paste options_markdown()'s output"
