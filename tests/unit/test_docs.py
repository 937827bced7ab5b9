"""The README's configuration table and the log schema document stay complete."""
import dataclasses
import os

from mpips.config import Config
from mpips.io.log import TABLES

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))


def read(name):
    with open(os.path.join(ROOT, name)) as fh:
        return fh.read()


def test_readme_documents_every_setting():
    readme = read("README.md")
    missing = [f.name for f in dataclasses.fields(Config) if f"| `{f.name}` |" not in readme]
    assert not missing, f"README configuration table lacks {missing}"


def test_readme_starts_with_the_two_commands():
    readme = read("README.md")
    assert readme.index("make demo") < readme.index("## Running")
    assert readme.index("make test") < readme.index("## Running")


def test_log_schema_documents_every_column():
    doc = read("docs/log-schema.md")
    missing = [f"{t}.{c}" for t, dt in TABLES.items() for c in dt.names if f"| `{c}` |" not in doc]
    assert not missing, f"docs/log-schema.md lacks {missing}"
