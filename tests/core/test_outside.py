"""Which sessions an agent CLI runs outside Procession: a real process whose command line names
the CLI's own session id, as a person's ``opencode -s ID`` in a terminal does. A run of
Procession's own (a fork's first run names its parent's session) is never taken for one."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from procession.calls.outside import Looker


@pytest.fixture
def cli(tmp_path: Path) -> Iterator[Path]:
    """An executable named like the CLI (what the Looker looks for), that waits."""
    path = tmp_path / "opencode"
    path.write_text("#!/bin/sh\nsleep 30\n")  # the shell stays, its command line naming the session
    path.chmod(0o755)
    yield path


def running(proc: subprocess.Popen[bytes]) -> None:
    """Once its command line is the script's (the shell has read it)."""
    import psutil

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and "ses_parent" not in psutil.Process(proc.pid).cmdline():
        time.sleep(0.02)


def test_a_cli_opened_by_a_person_is_found_and_a_run_of_procession_s_is_not(cli: Path) -> None:
    refs = {3: {"cli": "opencode", "id": "ses_parent"}}
    ours = subprocess.Popen([str(cli), "-s", "ses_parent", "--fork"],
                            env={**os.environ, "PROCESSION_SESSION": "4", "PROCESSION_DB": "/x.db"})
    try:
        running(ours)
        assert Looker().look(refs) == {}  # the fork's first run, Procession's: not "open outside"
    finally:
        ours.kill()
        ours.wait()
    person = subprocess.Popen([str(cli), "-s", "ses_parent"], env={k: v for k, v in os.environ.items()
                                                                   if not k.startswith("PROCESSION_")})
    try:
        running(person)
        found = Looker().look(refs)
        assert list(found) == [3] and found[3].pid == person.pid
    finally:
        person.kill()
        person.wait()
