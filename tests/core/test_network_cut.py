"""Three hosts, each on a network link of its own, as an operator's would be: an engine per host in
a network namespace of its own (``support.netns``), one host's link to the PostgreSQL server
pulled like a cable (packets dropped, nothing refused or reset) for 30 s, then mended.

Every connection has keepalives, a connect timeout and a TCP user timeout (``store.postgres.LINK``):
the cut host's engine says within seconds that it cannot reach the store, a call made there
meanwhile fails in one line within its timeout instead of hanging, the other hosts run on as if
nothing happened, an engine started on another host to take the cut one over is refused (it is
cut off, not dead: ``procession host H --dead`` is the operator's word), and once the link is
back the cut engine carries on: a run that ended during the outage is recorded once, nothing is
run twice."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import HANG_S, until
from procession import Workspace
from support import netns
from support.hosts import ELSEWHERE, spawn_on

#: The hosts, each in a namespace of its own: the first one's link is cut.
HOSTS = ("cutoff", "north", "south")
CUT_S = 30.0


@pytest.fixture
def links(postgres: Any) -> Iterator[list[netns.Link]]:
    why = netns.available()
    if why:
        if os.environ.get("PROCESSION_REQUIRE_NETNS") == "1":
            pytest.fail(why)
        pytest.skip(why)
    with contextlib.ExitStack() as made:
        yield [made.enter_context(netns.Link(postgres.port)) for _ in HOSTS]


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


def reached(url: str, link: netns.Link) -> str:
    """The workspace's address as a host behind ``link`` reaches the server."""
    return urllib.parse.urlsplit(url)._replace(netloc=f"procession@{link.address}:{link.port}").geturl()


def procession(link: netns.Link, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """A call made on the host behind ``link``."""
    return subprocess.run([*link.prefix(), sys.executable, "-m", "procession", "--db", reached(url, link), *args],
                          capture_output=True, text=True, timeout=HANG_S)


async def test_a_cut_link_is_said_within_seconds_no_call_hangs_the_others_run_on_and_the_engine_carries_on(
        links: list[netns.Link], postgres: Any, tmp_path: Path) -> None:
    url = postgres.workspace()
    ws = await Workspace.open(url)
    ran = tmp_path / "ran.txt"
    engines: list[subprocess.Popen[str]] = []
    said: list[Said] = []
    try:
        slow = await spawn_on(ws, HOSTS[0], "slow", f"command:sh -c 'sleep 4; echo slow >> {ran}'", cwd=str(tmp_path))
        after = await spawn_on(ws, HOSTS[0], "after", f"command:sh -c 'echo after >> {ran}'", cwd=str(tmp_path))
        others = [await spawn_on(ws, host, host, f"command:sh -c 'echo {host} >> {ran}'", cwd=str(tmp_path))
                  for host in HOSTS[1:]]
        for host, link in zip(HOSTS, links):
            engines.append(subprocess.Popen([*link.prefix(), sys.executable, "-m", "procession", "--db",
                                             reached(url, link), "--host", host, "run", "--grace", "0.3"],
                                            stderr=subprocess.PIPE, text=True))
            said.append(Said(engines[-1]))
        for host in HOSTS:
            await until(lambda: _engine_of(ws, host))
        await ws.activate(slow)
        await until(lambda: _running(ws, slow))
        cut_link = links[0]
        cut_link.cut()
        cut = time.monotonic()
        noticed = said[0].next("not renewed", timeout=30)
        assert noticed - cut < 10, f"the outage was said {noticed - cut:.1f} s after the cut"

        start = time.monotonic()
        call = procession(cut_link, url, "ps")
        took = time.monotonic() - start
        assert call.returncode != 0 and "Traceback" not in call.stderr and took < 15, (took, call.stderr)
        assert len(call.stderr.strip().splitlines()) == 1 and "cannot be reached" in call.stderr

        for sid in others:  # the other hosts run on, the cut one's link down
            await ws.activate(sid)
        for sid in others:
            await until(lambda: _ended(ws, sid))
        taking = subprocess.run(  # from north, another machine: refused, for cut off is not dead
            [*links[1].prefix(), sys.executable, "-c", ELSEWHERE, "0", "--db", reached(url, links[1]), "--host",
             HOSTS[0], "run"], capture_output=True, text=True, timeout=HANG_S)
        assert taking.returncode != 0 and "Traceback" not in taking.stderr, taking.stderr
        assert f"procession host {HOSTS[0]} --dead" in taking.stderr, taking.stderr
        assert time.monotonic() - cut < CUT_S, "the cut was over before the others were tried"

        time.sleep(max(0.0, CUT_S - (time.monotonic() - cut)))
        cut_link.mend()
        mended = time.monotonic()
        back = said[0].next("renewed again", timeout=30)
        assert back - mended < 10, f"the engine came back {back - mended:.1f} s after the link"
        await until(lambda: _ended(ws, slow))
        await ws.activate(after)
        await until(lambda: _ended(ws, after))
        assert sorted(ran.read_text().split()) == sorted(["after", "slow", *HOSTS[1:]])  # each ran once
        [run] = await ws.runs(slow)
        assert run.outcome == "ok"  # its end, reached during the outage, recorded once back
        assert all(engine.poll() is None for engine in engines)  # every one carried on
        for other in said[1:]:
            assert "not renewed" not in "".join(other.all), other.all  # the others never lost the store
    finally:
        for link in links:
            link.mend()
        for engine, heard in zip(engines, said):
            engine.send_signal(signal.SIGTERM)
            try:
                engine.wait(timeout=30)
            except subprocess.TimeoutExpired:  # deaf to its stop: killed, and said
                engine.kill()
                engine.wait()
                raise AssertionError(f"an engine did not stop on SIGTERM; said: {''.join(heard.all)}") from None
        await ws.close()


async def _engine_of(ws: Workspace, host: str) -> bool:
    return any(e["host"] == host and e["alive"] for e in (await ws.activity())["engines"])


async def _running(ws: Workspace, sid: int) -> bool:
    runs = await ws.runs(sid)
    return bool(runs) and runs[-1].pid is not None and runs[-1].ended is None


async def _ended(ws: Workspace, sid: int) -> bool:
    runs = await ws.runs(sid)
    return bool(runs) and all(r.ended for r in runs)
