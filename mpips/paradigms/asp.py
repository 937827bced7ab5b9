"""ASP: no gate on other workers (only read-your-writes, `Paradigm.gate`);
every push is applied when it arrives."""
from __future__ import annotations

from .base import Paradigm


class ASP(Paradigm):
    name = "asp"
