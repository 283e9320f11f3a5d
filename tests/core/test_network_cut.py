"""A host whose network is cut, as an operator's would be: an engine in a network namespace of
its own (``support.netns``), its link to the PostgreSQL server pulled like a cable (packets
dropped, nothing refused or reset) for a while, then mended.

Every connection has keepalives, a connect timeout and a TCP user timeout (``store.postgres.LINK``):
the engine says within seconds that it cannot reach the store, a call made meanwhile fails in
one line within its timeout instead of hanging, and once the link is back the engine carries
on: a run that ended during the outage is recorded once, nothing is run twice. (The issue's
cut lasted 30 s; this one 15 s: each timeout is 5-6 s.)"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from conftest import HANG_S, until
from procession import Workspace
from support import netns
from support.hosts import spawn_on

#: The host the namespace stands for.
HOST = "cutoff"
CUT_S = 15.0


@pytest.fixture
def link(postgres: Any) -> Any:
    why = netns.available()
    if why:
        if os.environ.get("PROCESSION_REQUIRE_NETNS") == "1":
            pytest.fail(why)
        pytest.skip(why)
    with netns.Link(postgres.port) as made:
        yield made


class Said:
    """What a process writes on its standard error, each line with the time it came."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: queue.Queue[tuple[float, str]] = queue.Queue()
        self.all: list[str] = []
        assert proc.stderr is not None
        stream = proc.stderr

        def read() -> None:
            for line in stream:
                self.all.append(line)
                self.lines.put((time.monotonic(), line))

        threading.Thread(target=read, daemon=True).start()

    def next(self, part: str, timeout: float) -> float:
        """When a line holding ``part`` came (waiting at most ``timeout`` s for it)."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                at, line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            if part in line:
                return at
        raise AssertionError(f"no line with {part!r} within {timeout:g} s; said: {''.join(self.all)}")


async def test_a_cut_link_is_said_within_seconds_no_call_hangs_and_the_engine_carries_on(
        link: netns.Link, postgres: Any, tmp_path: Path) -> None:
    url = postgres.workspace()
    parts = urllib.parse.urlsplit(url)
    away = parts._replace(netloc=f"procession@{link.address}:{link.port}").geturl()  # as the host reaches it
    ws = await Workspace.open(url)
    ran = tmp_path / "ran.txt"
    try:
        slow = await spawn_on(ws, HOST, "slow", f"command:sh -c 'sleep 4; echo slow >> {ran}'", cwd=str(tmp_path))
        after = await spawn_on(ws, HOST, "after", f"command:sh -c 'echo after >> {ran}'", cwd=str(tmp_path))
        engine = subprocess.Popen([*link.prefix(), sys.executable, "-m", "procession", "--db", away, "--host", HOST,
                                   "run", "--grace", "0.3"], stderr=subprocess.PIPE, text=True)
        said = Said(engine)
        try:
            await until(lambda: _engine_of(ws, HOST))
            await ws.activate(slow)
            await until(lambda: _running(ws, slow))
            link.cut()
            cut = time.monotonic()
            noticed = said.next("not renewed", timeout=30)
            assert noticed - cut < 10, f"the outage was said {noticed - cut:.1f} s after the cut"

            start = time.monotonic()
            call = subprocess.run([*link.prefix(), sys.executable, "-m", "procession", "--db", away, "ps"],
                                  capture_output=True, text=True, timeout=HANG_S)
            took = time.monotonic() - start
            assert call.returncode != 0 and "Traceback" not in call.stderr and took < 15, (took, call.stderr)
            assert len(call.stderr.strip().splitlines()) == 1 and "cannot be reached" in call.stderr

            time.sleep(max(0.0, CUT_S - (time.monotonic() - cut)))
            link.mend()
            mended = time.monotonic()
            back = said.next("renewed again", timeout=30)
            assert back - mended < 10, f"the engine came back {back - mended:.1f} s after the link"
            await until(lambda: _ended(ws, slow))
            await ws.activate(after)
            await until(lambda: _ended(ws, after))
            assert sorted(ran.read_text().split()) == ["after", "slow"]  # each ran once
            [run] = await ws.runs(slow)
            assert run.outcome == "ok"  # its end, reached during the outage, recorded once back
            assert engine.poll() is None  # it carried on
        finally:
            link.mend()
            engine.send_signal(signal.SIGTERM)
            try:
                engine.wait(timeout=30)
            except subprocess.TimeoutExpired:  # deaf to its stop: killed, and said
                engine.kill()
                engine.wait()
                raise AssertionError(f"the engine did not stop on SIGTERM; said: {''.join(said.all)}") from None
    finally:
        await ws.close()


async def _engine_of(ws: Workspace, host: str) -> bool:
    return any(e["host"] == host and e["alive"] for e in (await ws.activity())["engines"])


async def _running(ws: Workspace, sid: int) -> bool:
    runs = await ws.runs(sid)
    return bool(runs) and runs[-1].pid is not None and runs[-1].ended is None


async def _ended(ws: Workspace, sid: int) -> bool:
    runs = await ws.runs(sid)
    return bool(runs) and all(r.ended for r in runs)
