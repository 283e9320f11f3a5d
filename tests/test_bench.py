"""Every benchmark runs at its tiny size, so that none rots (the figures are in bench/)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench"


def test_chaos_tiny_loses_nothing() -> None:
    proc = subprocess.run([sys.executable, str(BENCH / "chaos.py"), "--tiny"], capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "lost: 0" in proc.stdout.splitlines()[-1]


def test_agents_tiny_measures_each_cli_it_was_given() -> None:
    from support.agent_clis import require_cli

    for name in ("claude", "codex"):
        require_cli(name)  # skipped (or failed, where they are required) without the CLIs
    proc = subprocess.run([sys.executable, str(BENCH / "agents.py"), "--tiny", "--only", "claude,codex"],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not figures["missing"]
    for name in ("claude", "codex"):
        assert 0 < figures["results"][f"{name}_activate_first_request"]["median"] < 60


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


def test_loop_tiny_measures_each_tool_kind_and_the_savings() -> None:
    proc = subprocess.run([sys.executable, str(BENCH / "loop.py"), "--tiny"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    figures = json.loads(proc.stdout.strip().splitlines()[-1])["results"]
    assert all(0 < figures[k]["median"] < 1 for k in figures if k.startswith("loop_"))
    assert figures["saving_mask-tools"]["after"] < figures["saving_mask-tools"]["before"] / 2
