"""Every benchmark runs at its tiny size, so that none rots (the figures are in bench/)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench"


def test_mcp_server_tiny_measures_every_round_trip() -> None:
    proc = subprocess.run([sys.executable, str(BENCH / "mcp_server.py"), "--tiny"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    report = json.loads(proc.stdout[proc.stdout.index("\n{") + 1:])
    assert report["mode"] == "tiny"
    figures = report["results"]
    assert set(figures) == {"call_ps", "call_show", "call_send", "call_memory_set", "call_wait", "call_refused",
                            "start"}
    assert all(len(f["runs"]) == 25 for k, f in figures.items() if k != "start")
    assert all(0 < f["median"] < 5 for f in figures.values())
