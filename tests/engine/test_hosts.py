"""Several hosts on one PostgreSQL workspace: an engine per host, each running its own host's
sessions only, every run exactly once; a killed host's sessions marked lost, never run
elsewhere, recovered by that host's own engine when it comes back.

The hosts are engine processes on this machine, each named by ``--host`` (as the issue's
tests must: one machine stands for several); the database is the tests' real server.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

from conftest import HANG_S, sql, until
from procession import State, Workspace
from procession.model import hosts
from support.hosts import spawn_on, start_engine, stop

HOSTS = ("laptop", "devbox", "gpu")


async def test_activations_across_three_engines_each_run_once_on_their_host(postgres) -> None:
    url = postgres.workspace()
    ws = await Workspace.open(url)
    try:
        sessions = {host: [await spawn_on(ws, host, f"{host}-{i}", "builtin:echo")
                           for i in range(100)] for host in HOSTS}
        engines = [start_engine(url, host, "--slots", "4") for host in HOSTS]
        try:
            await until(lambda: len(sql(url, "SELECT host FROM engines")) == 3)
            for host in HOSTS:
                for sid in sessions[host]:
                    await ws.activate(sid)
            try:
                ran = await until(lambda: _runs_done(url, 300))
            except AssertionError:
                raise AssertionError("\n".join(stop(e) for e in engines)) from None
            by_host = dict(sql(url, "SELECT e.host, e.token FROM engines e"))
        finally:
            errs = [stop(e) for e in engines if e.returncode is None]
        assert len(ran) == 300 and Counter(sid for sid, _, _ in ran) == Counter(
            sid for host in HOSTS for sid in sessions[host])  # every activation ran, none twice
        host_of = {sid: host for host in HOSTS for sid in sessions[host]}
        assert all(engine == by_host[host_of[sid]] for sid, engine, _ in ran)  # each on its own host's engine
        assert {outcome for _, _, outcome in ran} == {"ok"}
        who = {w for (w,) in sql(url, "SELECT DISTINCT who FROM journal WHERE call = 'start'")}
        # the database's role first (the server's word), then what the process says of itself
        assert who == {f"procession · {hosts.who().split('@')[0]}@{h}" for h in HOSTS}, errs
    finally:
        await ws.close()


def _runs_done(url: str, count: int) -> list[tuple[int, str, str]] | None:
    found = sql(url, "SELECT session_id, engine, outcome FROM runs WHERE ended IS NOT NULL ORDER BY id")
    return [tuple(r) for r in found] if len(found) >= count else None  # type: ignore[misc]


async def test_a_killed_host_is_lost_to_the_others_and_recovers_its_own_runs(postgres) -> None:
    url = postgres.workspace()
    ws = await Workspace.open(url)
    try:
        long = await spawn_on(ws, "laptop", "long", "builtin:sleep:60")
        other = await spawn_on(ws, "devbox", "other", "builtin:digest")
        laptop, devbox = start_engine(url, "laptop"), start_engine(url, "devbox")
        try:
            await until(lambda: len(sql(url, "SELECT host FROM engines")) == 2)
            await ws.activate(long)
            await until(lambda: sql(url, "SELECT 1 FROM runs WHERE session_id = ? AND ended IS NULL", (long,)))
            laptop.kill()
            laptop.wait()
            # the laptop is lost to every other host; its session waits for it, run by no one else
            info = await until(lambda: _lost(ws, long))
            assert info.state is State.RUNNING and info.host == "laptop"
            assert not (await ws.info(other)).host_lost
            await ws.activate(other)  # devbox goes on with its own
            await until(lambda: sql(url, "SELECT 1 FROM runs WHERE session_id = ? AND ended IS NOT NULL", (other,)))
            assert sql(url, "SELECT count(*) FROM runs WHERE session_id = ?", (long,)) == [(1,)]
            header = await ws.activity()
            assert {(e["host"], e["alive"]) for e in header["engines"]} == {("laptop", False), ("devbox", True)}
            # the laptop comes back: its engine recovers its own run as lost
            laptop = start_engine(url, "laptop")
            await until(lambda: sql(url, "SELECT outcome FROM runs WHERE session_id = ? AND ended IS NOT NULL",
                                    (long,)) == [("lost",)])
            info = await until(lambda: _found(ws, long))
            assert not info.host_lost and info.state is State.SLEEPING
            recovered = sql(url, "SELECT who FROM journal WHERE call = 'recover' ORDER BY id DESC LIMIT 1")
            assert recovered[0][0].endswith("@laptop")
        finally:
            for engine in (laptop, devbox):
                if engine.poll() is None:
                    stop(engine)
    finally:
        await ws.close()


async def _lost(ws: Workspace, sid: int):
    info = await ws.info(sid)
    return info if info.host_lost else None


async def _found(ws: Workspace, sid: int):
    info = await ws.info(sid)
    return info if not info.host_lost and info.state is not State.RUNNING else None


async def test_an_engine_refuses_a_second_one_for_its_host_only(postgres) -> None:
    url = postgres.workspace()
    await (await Workspace.open(url)).close()
    first = start_engine(url, "laptop")
    try:
        await until(lambda: sql(url, "SELECT host FROM engines"))
        same = subprocess.run([sys.executable, "-m", "procession", "--db", url, "--host", "laptop", "run"],
                              capture_output=True, text=True, timeout=HANG_S)
        assert same.returncode != 0 and "for host laptop" in same.stderr and "Traceback" not in same.stderr
        other = start_engine(url, "devbox")
        await until(lambda: len(sql(url, "SELECT host FROM engines")) == 2)
        stop(other)
    finally:
        stop(first)
    assert sql(url, "SELECT host FROM engines") == []  # each gave its lease back


def test_a_host_name_that_cannot_be_is_refused_in_one_line(cli) -> None:
    done = cli("--host", "bad host!", "ps", check=False)
    assert done.returncode != 0 and "cannot name a host" in done.stderr and "Traceback" not in done.stderr

