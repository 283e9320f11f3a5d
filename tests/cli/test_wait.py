"""``procession wait`` sees what the calls before it caused: a run that ended before it started
is not missed (the bug every script met: ``send; activate; wait`` timed out on a run that had
ended a second before), a run that ends while it waits wakes it, a message that arrives between
the calls wakes it, a loop of waits never returns the same run twice, and a timeout exits 124.
Real ``procession`` processes from one shell (a process session), a real engine."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import until


@pytest.fixture
def engine(db: Path, cli: Any) -> Iterator[subprocess.Popen[bytes]]:
    cli("spawn", "first", "--agent", "a")  # the workspace the engine opens
    proc = subprocess.Popen([sys.executable, "-m", "procession", "run"], env=cli.env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    yield proc
    proc.terminate()
    proc.wait()


def runs_ended(cli: Any, sid: int) -> list[dict[str, Any]]:
    return [r for r in cli.json("runs", str(sid)) if r["ended"]]


async def test_a_run_that_ended_before_wait_started_is_not_missed(cli: Any, engine: Any, tmp_path: Path) -> None:
    sid = cli.json("spawn", "quick", "--agent", "a", "--runner", "command:echo done")["sid"]
    sent = cli.json("send", str(sid), "q")
    activated = cli("activate", str(sid))
    assert f"; wait {sid} --since " in activated.stdout  # where to wait from, printed
    await until(lambda: runs_ended(cli, sid))  # over before the wait starts
    woke = cli("wait", str(sid), "--timeout", "10", "--json")
    assert woke.returncode == 0
    got = json.loads(woke.stdout)
    assert got["woke"] == "run" and got["run"]["outcome"] == "ok" and got["row"] > sent["row"]
    assert cli.json("wait", str(sid), "--since", str(sent["row"]), "--timeout", "10")["run"]["id"] == got["run"]["id"]
    again = cli("wait", str(sid), "--timeout", "0.3", check=False)  # a loop's next wait: that run was seen
    assert again.returncode == 124 and "timed out" in again.stdout


async def test_a_run_that_ends_while_it_waits_wakes_it(cli: Any, engine: Any, tmp_path: Path) -> None:
    go = tmp_path / "go"
    sid = cli.json("spawn", "slow", "--agent", "a", "--runner", f"command:while [ ! -e {go} ]; do sleep 0.05; done")["sid"]
    cli("activate", str(sid))
    waiting = subprocess.Popen([sys.executable, "-m", "procession", "wait", str(sid), "--timeout", "60", "--json"],
                               env=cli.env(), cwd=cli.cwd, stdout=subprocess.PIPE, text=True)
    go.touch()
    out, _ = waiting.communicate(timeout=120)
    assert waiting.returncode == 0 and json.loads(out)["woke"] == "run"


def test_a_message_that_arrives_between_the_calls_wakes_it(cli: Any) -> None:
    sid = cli.json("spawn", "inbox", "--agent", "a")["sid"]
    at = cli.json("activate", str(sid))[0]["row"]  # no engine: it stays queued
    cli("send", str(sid), "from elsewhere", shell=True)  # another shell's call
    got = cli.json("wait", str(sid), "--timeout", "10")
    assert got["woke"] == "message" and got["row"] > at
    assert [m["content"] for m in got["messages"]] == ["from elsewhere"]


def test_a_wait_from_a_new_shell_waits_from_now_and_a_bad_point_is_refused(cli: Any) -> None:
    sid = cli.json("spawn", "idle", "--agent", "a")["sid"]
    cli("send", str(sid), "old news", shell=True)
    timed_out = cli("wait", str(sid), "--timeout", "0.2", check=False)
    assert timed_out.returncode == 124  # what happened before this shell looked is not news to it
    refused = cli("wait", str(sid), "--since", "999999", check=False)
    assert refused.returncode == 1 and "the journal has no row 999999 yet" in refused.stderr
