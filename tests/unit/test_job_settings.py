"""jobs/common.sh turns MPIPS_<SETTING> variables into train's flags for every
setting `_mpips_fields` lists: the shared ones and each paradigm's own (a
job's MPIPS_GROUPS or MPIPS_STALENESS must reach GSSP's and SSP's Options)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from mpips.config import SHARED
from mpips.paradigms import option_specs

ROOT = Path(__file__).resolve().parents[2]


def test_the_job_scripts_take_every_setting_from_the_environment():
    script = f'source "{ROOT}/jobs/common.sh" >/dev/null 2>&1; _mpips_fields'
    p = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60,
                       env={"MPIPS_PYTHON": sys.executable, "MPIPS_ROOT": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert p.returncode == 0, p.stderr
    listed = dict(item.partition(":")[::2] for item in p.stdout.split())
    every = set(SHARED) | {name for own in option_specs().values() for name in own}
    assert set(listed) == every, sorted(every ^ set(listed))
    assert listed["groups"] == "" and listed["staleness"] == "" and listed["nesterov"] == "bool"
