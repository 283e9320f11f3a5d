"""Hosts of one workspace, as the tests make them on one machine: engine processes each named
by ``--host`` (one machine stands for several, as the issue's tests must), sessions spawned as
a host's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping

from conftest import HANG_S
from procession import Workspace
from procession.model import hosts


def start_engine(url: str, host: str, *extra: str, env: Mapping[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "procession", "--db", url, "--host", host, "run", "--grace", "0.3",
                             *extra], stderr=subprocess.PIPE, text=True, env=env)


#: An engine as another machine runs it: ``socket.gethostname`` names a machine of its own (a
#: pid of it means nothing here), its clock off by ``sys.argv[1]`` seconds (its ``time.time``).
ELSEWHERE = ("import socket, sys, time, runpy; skew = float(sys.argv.pop(1)); real = time.time;"
             " time.time = lambda: real() + skew; socket.gethostname = lambda: 'elsewhere';"
             " sys.argv[0] = 'procession'; runpy.run_module('procession', run_name='__main__')")


def elsewhere_engine(url: str, host: str, skew: float = 0.0) -> subprocess.Popen[str]:
    """An engine of ``host`` on another machine (``ELSEWHERE``), its clock off by ``skew`` seconds."""
    return subprocess.Popen([sys.executable, "-c", ELSEWHERE, str(skew), "--db", url, "--host", host, "run",
                             "--grace", "0.3"], stderr=subprocess.PIPE, text=True)


def stop(engine: subprocess.Popen[str]) -> str:
    """Stop an engine as a person does (SIGTERM); what it said, once it stopped cleanly."""
    engine.send_signal(signal.SIGTERM)
    _, err = engine.communicate(timeout=HANG_S)
    assert engine.returncode == 0, err
    return err


async def spawn_on(ws: Workspace, host: str, name: str, runner: str, **options: object) -> int:
    os.environ[hosts.ENV] = host  # as `procession --host HOST spawn` does for its process
    try:
        return (await ws.spawn(name, "fleet", runner=runner, **options)).sid  # type: ignore[arg-type]
    finally:
        del os.environ[hosts.ENV]
