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
