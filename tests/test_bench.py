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


def test_git_tiny_measures_commits_and_worktree_forks() -> None:
    import json

    proc = subprocess.run([sys.executable, str(BENCH / "git.py"), "--tiny"], capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    figures = json.loads(proc.stdout.strip().splitlines()[-1])["results"]
    assert figures["commit_to_run"]["runs_started"] == 3  # one run per commit, none missed, none twice
    assert 0 < figures["commit_to_run"]["median"] < 5
    for key in ("fork_worktree_cli", "fork_worktree_api", "git_worktree_add", "merge_worktree_cli", "fork_copy_cli"):
        assert 0 < figures[key]["median"] < 60, key
