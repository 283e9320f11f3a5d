"""``activate --now``: an engine in the CLI's own process, stopped as a person stops it (Ctrl-C,
a ``kill``, the terminal closing): its step is interrupted and its run recorded, never left
running unsupervised with the session ``running``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import Cli
from support.runs import PID_NS, alive, pid_in


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_foreground_run_stopped_by_a_signal_is_interrupted_and_recorded(cli: Cli, tmp_path: Path,
                                                                        sig: signal.Signals) -> None:
    pids = tmp_path / "pid"
    cli("spawn", "long", "--agent", "a", "--runner", f"command:echo $$ {PID_NS} > {pids}; exec sleep 60")
    proc = subprocess.Popen([sys.executable, "-m", "procession", "activate", "1", "--now"], cwd=tmp_path,
                            env=cli.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while pid_in(pids) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    step = pid_in(pids)
    assert step is not None and alive(step)
    os.kill(proc.pid, sig)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + sig or (sig == signal.SIGINT and proc.returncode in (1, 130)), (out, err)
    if sig != signal.SIGINT:
        assert f"stopped by {sig.name}: the step was interrupted and its run recorded" in err
    assert not alive(step)
    [run] = cli.json("runs", "1")  # type: ignore[misc]
    assert run["outcome"] == "interrupted" and run["ended"]
    assert cli.json("ps")[0]["state"] == "sleeping"  # type: ignore[index]
