"""Every benchmark runs at its tiny size, so that none rots (the figures are in bench/)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench"


def test_chaos_tiny_loses_nothing() -> None:
    proc = subprocess.run([sys.executable, str(BENCH / "chaos.py"), "--tiny"], capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "lost: 0" in proc.stdout.splitlines()[-1]
