"""Chaos: random calls from several processes while the engine is killed, the workspace is
locked for seconds at a time and the steps misbehave; then a count of what was lost.

    python bench/chaos.py [--minutes 5] [--workers 3] [--sessions 12] [--kill-every 10]
                          [--tracker auto|cgroup|marker] [--store sqlite|postgresql] [--tiny]
                          [--seed N] [--json-out FILE]

What runs, for ``--minutes``:

- ``--workers`` processes, each a ``Workspace`` of its own (actor ``chaosN``), making random
  calls on random sessions: send, memory set, spawn, fork, save, compress, expand, activate,
  suspend, resume, interrupt, cancel, nice, approve, merge, trigger add. Each call the
  workspace acknowledged is written down with what it promised.
- a ``procession run`` engine, SIGKILLed (or, one time in five, stopped with SIGTERM) every
  ``--kill-every`` seconds or so and started again; now and then a rival engine is started
  beside the live one, which must refuse to run.
- a lock holder that keeps the write lock (``BEGIN IMMEDIATE``) or a read snapshot for 2 to
  12 s at a time, longer than a call's busy timeout.
- steps (``chaos_step.py``) that misbehave as their run id picks: orphans in sessions of
  their own, grandchildren that keep the pipes open, children with no environment, 8 MiB of
  output with the input never read, hangs deaf to SIGTERM, garbage and 1,000-deep JSON on
  stdout, 20 children at once, exits before reading, failures; the rest reply normally.
- ``every`` and ``watch`` triggers (the folder is touched every 2 s).

With ``--store postgresql`` the workspace is a PostgreSQL one (the tests' own server, started
for the run: ``tests/support/postgres.py``) shared by two hosts, ``alpha`` and ``beta``, each
with its engine killed and started again and its rivals, the sessions spread over both; the
lock holder keeps the workspace's writer lock, or **stops the server** for 1 to 4 s and starts
it again (every connection cut, as a network cut is).

Then a last engine starts on each host (it must clean up after the one killed before it) and
stops, and everything is checked: every acknowledged message, memory value, session, fork and
checkpoint is there; the journal has exactly one row per acknowledged call; no run is left
open and no session running; no two runs of one session ran at once, and every run ran on
its session's own host's engine (none twice, none elsewhere); no step process is alive anywhere (found by a tag on their
command lines); every step that finished while its engine lived long enough after has its
reply in the history (unless a call ended the session first); no rival engine ran; no
worker met an error that was not a refusal; ``PRAGMA integrity_check`` says ok (SQLite). It prints
what it tried, a table of the checks, one JSON object and ``lost: N``; it exits 1 if
anything was lost.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PY = sys.executable
#: The hosts of a PostgreSQL run (an SQLite one is this machine's one host).
HOSTS = ["alpha", "beta"]


def this_host() -> str:
    from procession.model import hosts

    return hosts.this()
#: How long an engine must have lived after a step finished to owe its reply, beyond the
#: time the workspace was locked meanwhile.
GRACE_S = 3.0


# -- the workers ---------------------------------------------------------------------------

async def worker(db: str, index: int, until: float, seed: int, log: Path, folder: Path, runner: str,
                 cap: int) -> None:
    from procession import Workspace
    from procession.model.errors import ProcessionError

    ws = await Workspace.open(db, actor=f"chaos{index}")
    rng = random.Random(seed)
    tried: collections.Counter[str] = collections.Counter()
    refused: collections.Counter[str] = collections.Counter()
    errors: list[str] = []
    n = 0
    with log.open("a") as out:
        def ack(call: str, sid: int, **promise: Any) -> None:
            out.write(json.dumps({"call": call, "sid": sid, **promise}) + "\n")
            out.flush()

        while time.time() < until:
            n += 1
            try:
                sessions = await ws.ps(all=True)
            except ProcessionError:
                await asyncio.sleep(0.1)
                continue
            live = [s for s in sessions if s.state.value != "terminated"] or sessions
            if not live:
                await asyncio.sleep(0.1)
                continue
            s = rng.choice(live)
            call = rng.choices(list(WEIGHTS), weights=list(WEIGHTS.values()))[0]
            tried[call] += 1
            try:
                match call:
                    case "send":
                        token = f"tok-{index}-{n}"
                        await ws.send(s.id, token)
                        ack(call, s.id, message=token)
                    case "memory_set":
                        key = f"k{index}_{n}"
                        await ws.memory_set(s.id, key, n)
                        ack(call, s.id, key=key, value=n)
                    case "spawn":
                        if len(sessions) >= cap:
                            continue
                        name = f"w{index}-{n}"
                        sid = (await ws.spawn(name, f"agent{n % 3}", runner=runner, timeout=12,
                                              cwd=str(folder))).sid
                        ack(call, sid, name=name)
                    case "fork":
                        if len(sessions) >= cap:
                            continue
                        name = f"f{index}-{n}"
                        sid = (await ws.fork(s.id, name)).sid
                        ack(call, sid, parent=s.id, name=name)
                    case "save":
                        name = f"cp{index}-{n}"
                        await ws.save(s.id, name)
                        ack(call, s.id, checkpoint=name)
                    case "merge":
                        forks = [x for x in live if x.parent is not None]
                        if not forks:
                            continue
                        f = rng.choice(forks)
                        await ws.merge(f.id, f.parent)  # type: ignore[arg-type]
                        ack(call, f.id, target=f.parent)
                    case "trigger_add":
                        await ws.trigger_add(s.id, "every", [f"{rng.randint(3, 9)}s"])
                        ack(call, s.id)
                    case "compress":
                        await ws.compress(s.id, keep_last=4)
                        ack(call, s.id)
                    case "nice":
                        await ws.nice(s.id, rng.randint(-5, 5))
                        ack(call, s.id)
                    case _:
                        await getattr(ws, call)(s.id)
                        ack(call, s.id)
            except ProcessionError as e:
                refused[type(e).__name__] += 1
            except Exception as e:  # a bug: every failure of a call must be a refusal
                errors.append(f"{call} {s.id}: {type(e).__name__}: {e}")
            await asyncio.sleep(rng.uniform(0, 0.05))
    await ws.close()
    summary = {"tried": tried, "refused": refused, "errors": errors}
    (log.with_suffix(".summary")).write_text(json.dumps(summary))


WEIGHTS = {"send": 30, "memory_set": 15, "activate": 15, "suspend": 6, "resume": 6, "interrupt": 4, "cancel": 1,
           "spawn": 3, "fork": 3, "save": 3, "compress": 3, "expand": 2, "nice": 2, "approve": 2, "merge": 1,
           "trigger_add": 1}
#: The journal's name of a call whose method is named otherwise.
JOURNALED_AS = {"memory_set": "memory", "trigger_add": "trigger"}


# -- the engine and what attacks it ---------------------------------------------------------

class Engines:
    """A host's engine process: started, killed, started again; rivals tried beside it."""

    def __init__(self, store: Store, host: str, tracker: str, logs: Path) -> None:
        self.store, self.host, self.tracker, self.logs = store, host, tracker, logs
        self.proc: subprocess.Popen[bytes] | None = None
        self.lives: list[dict[str, Any]] = []  # start, end, how it ended
        self.rivals = {"tried": 0, "refused": 0, "ran": 0}

    def _argv(self) -> list[str]:
        return [PY, "-m", "procession", "--db", self.store.db, "--host", self.host, "run", "--slots", "3",
                "--tracker", self.tracker]

    def start(self) -> None:
        err = (self.logs / f"engine-{self.host}-{len(self.lives)}.log").open("wb")
        self.proc = subprocess.Popen(self._argv(), stdout=subprocess.DEVNULL, stderr=err)
        self.lives.append({"pid": self.proc.pid, "start": time.time(), "end": None, "how": None})

    def stop(self, sig: int) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:  # it ended before it was told to: an engine must not
            self.lives[-1]["died"] = self.proc.returncode
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            self.lives[-1]["stuck"] = True
        self.lives[-1].update(end=time.time(), how=signal.Signals(sig).name, code=self.proc.returncode)
        self.proc = None

    def holds_lease(self, within: float = 30.0) -> bool:
        """Wait until the live engine holds the lease (a restarted one takes a moment): a rival
        started before that may rightly win the race for it."""
        deadline = time.time() + within
        while time.time() < deadline and self.proc is not None and self.proc.poll() is None:
            try:
                row = self.store.query("SELECT pid FROM engines WHERE host = ?", (self.host,))
                if row and row[0][0] == self.proc.pid:
                    return True
            except Exception:  # noqa: BLE001 - the store held or down: look again
                pass
            time.sleep(0.1)
        return False

    def rival(self) -> None:
        """A second engine while one lives: it must refuse, and the first must live on."""
        if not self.holds_lease():
            return  # the live engine died or never took the lease: no fair rival (its own log says why)
        self.rivals["tried"] += 1
        rival = subprocess.Popen(self._argv(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            _, err = rival.communicate(timeout=30)
        except subprocess.TimeoutExpired:  # it is running: two engines
            rival.kill()
            _, err = rival.communicate()
        alive = self.proc is not None and self.proc.poll() is None
        if rival.returncode == 1 and alive and b"Traceback" not in err:
            self.rivals["refused"] += 1
        else:
            self.rivals["ran"] += 1
            self.rivals.setdefault("odd", []).append(  # type: ignore[attr-defined]
                {"code": rival.returncode, "said": err.decode(errors="replace")[-300:], "first_alive": alive})


def hold_locks(store: Store, until: float, rng: random.Random, holds: list[dict[str, Any]]) -> None:
    """Now and then: the write lock held, or a read snapshot, for 2 to 12 s; with PostgreSQL,
    the workspace's writer lock held, or the server stopped for 1 to 4 s."""
    while time.time() < until:
        time.sleep(rng.uniform(2, 8))
        if time.time() >= until:
            break
        if store.server is not None:
            kind = rng.choice(["write", "outage"])
            start = time.time()
            if kind == "outage":
                store.server.down()
                time.sleep(rng.uniform(1, 4))
                store.server.up()
            else:
                store.hold_writer(rng.uniform(2, 12))
            holds.append({"kind": kind, "start": start, "end": time.time(), "seconds": time.time() - start})
            continue
        kind = rng.choice(["write", "write", "read"])
        conn = sqlite3.connect(store.db, timeout=60, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE" if kind == "write" else "BEGIN")
            if kind == "read":
                conn.execute("SELECT count(*) FROM messages").fetchone()
            start = time.time()
            time.sleep(rng.uniform(2, 12))
            conn.execute("COMMIT")
            holds.append({"kind": kind, "start": start, "end": time.time(), "seconds": time.time() - start})
        finally:
            conn.close()


class Store:
    """Where the workspace is: an SQLite file, or a PostgreSQL one on a server of the run's own
    (``server``, which the lock holder stops and starts). ``query`` reads it from outside."""

    def __init__(self, db: str, server: Any = None) -> None:
        self.db, self.server = db, server

    def query(self, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """One statement, in SQLite's dialect (translated for PostgreSQL, as the calls are)."""
        if self.server is None:
            with sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=60) as conn:
                return conn.execute(statement, params).fetchall()
        import psycopg

        from procession.store.dialect import translate

        with psycopg.connect(self.db, autocommit=True, connect_timeout=10) as conn:
            cur = conn.execute(translate(statement), params)
            return [tuple(r) for r in cur.fetchall()] if cur.description else []

    def hold_writer(self, seconds: float) -> None:
        import psycopg

        from procession.store.postgres import WRITE_LOCK

        with psycopg.connect(self.db, connect_timeout=10) as conn:
            conn.execute(WRITE_LOCK)
            time.sleep(seconds)
            conn.commit()


# -- set-up and the checks ------------------------------------------------------------------

async def build(db: str, sessions: int, runner: str, folder: Path, watched: Path, hosts: list[str]) -> None:
    from procession import Workspace
    from procession.model.hosts import ENV

    ws = await Workspace.open(db, actor="setup")
    for i in range(sessions):
        os.environ[ENV] = hosts[i % len(hosts)]  # as `procession --host HOST spawn` does
        sid = (await ws.spawn(f"chaos {i}", f"agent{i % 3}", runner=runner, timeout=12, cwd=str(folder))).sid
        await ws.send(sid, f"session {i} begins")
        if i % 3 == 0:
            await ws.trigger_add(sid, "every", [f"{3 + i % 5}s"])
        if i % 4 == 1:
            await ws.trigger_add(sid, "watch", [str(watched)], debounce_ms=200)
    del os.environ[ENV]
    await ws.close()


def escaped(tag: str) -> list[int]:
    """Processes alive anywhere with the tag on their command line (steps and what they started)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                if tag.encode() in fh.read():
                    found.append(int(name))
        except OSError:
            pass
    return found


def owed_by(at: float, holds: list[dict[str, Any]]) -> float:
    """When a reply that was out at ``at`` must be in the store, if its engine still lives:
    ``GRACE_S`` later, plus the time the write lock was held (or the server down) meanwhile."""
    due = at + GRACE_S
    for h in sorted(holds, key=lambda h: h["start"]):
        if h["kind"] in ("write", "outage") and h["start"] <= due and h["end"] >= at:
            due = max(due, h["end"] + GRACE_S)
    return due


async def check(store: Store, logs: Path, tmp: Path, fleet: list[Engines], tag: str,
                holds: list[dict[str, Any]], died: list[int]) -> dict[str, Any]:
    from procession import Workspace
    from procession.model.errors import ProcessionError

    ws = await Workspace.open(store.db, actor="check")
    acks = [json.loads(line) for path in sorted(logs.glob("worker-*.jsonl")) for line in path.read_text().splitlines()]
    lost: collections.Counter[str] = collections.Counter()
    examples: dict[str, str] = {}

    def miss(what: str, detail: str) -> None:
        lost[what] += 1
        examples.setdefault(what, detail)

    histories: dict[int, list[str]] = {}

    async def history(sid: int) -> list[str]:
        if sid not in histories:
            histories[sid] = [m.content for m in await ws.history(sid)]
        return histories[sid]

    for a in acks:
        sid = a["sid"]
        try:
            if "message" in a and a["message"] not in await history(sid):
                miss("messages", f"{a['message']} in session {sid}")
            elif "key" in a and (await ws.show(sid)).memory.get(a["key"]) != a["value"]:
                miss("memory values", f"{a['key']} of session {sid}")
            elif a["call"] == "spawn" and (await ws.info(sid)).name != a["name"]:
                miss("sessions", f"session {sid} ({a['name']})")
            elif a["call"] == "fork" and (await ws.info(sid)).parent != a["parent"]:
                miss("forks", f"session {sid}, fork of {a['parent']}")
            elif "checkpoint" in a and a["checkpoint"] not in [c.name for c in (await ws.show(sid)).checkpoints]:
                miss("checkpoints", f"{a['checkpoint']} of session {sid}")
        except ProcessionError as e:
            miss(f"{a['call']} (session gone)", f"session {sid}: {e}")

    q = store.query
    journaled = collections.Counter(
        {(actor, call): n for actor, call, n in q(
            "SELECT actor, call, count(*) FROM journal WHERE actor LIKE 'chaos%' GROUP BY actor, call")})
    acked: collections.Counter[tuple[str, str]] = collections.Counter()
    for path in logs.glob("worker-*.jsonl"):
        actor = "chaos" + path.stem.split("-")[1]
        for line in path.read_text().splitlines():
            call = json.loads(line)["call"]
            acked[(actor, JOURNALED_AS.get(call, call))] += 1
    for key in set(journaled) | set(acked):
        if journaled[key] != acked[key]:
            miss("journal rows", f"{key}: {acked[key]} acknowledged, {journaled[key]} journaled")
    open_runs = q("SELECT count(*) FROM runs WHERE ended IS NULL")[0][0]
    running = q("SELECT count(*) FROM sessions WHERE state = 'running'")[0][0]
    outcomes = dict(q("SELECT coalesce(outcome, 'open'), count(*) FROM runs GROUP BY 1"))
    confined = q("SELECT count(*) FROM runs WHERE confinement LIKE 'landlock%'")[0][0]
    runs = {r: (sid, ended) for r, sid, ended in q("SELECT id, session_id, ended FROM runs")}
    ended_by_call = {sid: ts for sid, ts in q(  # cancelled, or merged away (the source is other_id)
        "SELECT sid, min(ts) FROM (SELECT session_id AS sid, ts FROM journal WHERE call = 'cancel'"
        " UNION ALL SELECT other_id, ts FROM journal WHERE call = 'merge') AS ended GROUP BY sid")}
    # none twice: no two runs of a session at once (a run claimed twice would be two open at once)
    overlapping = q("SELECT a.id, b.id, a.session_id FROM runs a JOIN runs b ON a.session_id = b.session_id"
                    " AND a.id < b.id AND b.started < coalesce(a.ended, 1e18)")
    if overlapping:
        miss("runs of one session at once", f"runs {overlapping[0][0]} and {overlapping[0][1]}"
                                            f" of session {overlapping[0][2]}")
    # none elsewhere: each run by an engine of its session's host (an engine's token, from its lease call)
    token_host = {json.loads(args).get("token"): who.rpartition("@")[2]
                  for args, who in q("SELECT args, who FROM journal WHERE call = 'lease' AND args IS NOT NULL")}
    elsewhere = [(r, host, token_host.get(engine)) for r, host, engine in q(
        "SELECT r.id, s.host, r.engine FROM runs r JOIN sessions s ON s.id = r.session_id")
        if token_host.get(engine) != host]
    if elsewhere:
        miss("runs on another host", f"run {elsewhere[0][0]} of a session of {elsewhere[0][1]}, by"
                                     f" {elsewhere[0][2]}")
    if store.server is None:
        integrity = q("PRAGMA integrity_check")[0][0]
        foreign = q("PRAGMA foreign_key_check")
    else:
        integrity, foreign = "ok", []  # the server checks every constraint at every commit
    if open_runs:
        miss("runs left open", f"{open_runs} runs")
    if running:
        miss("sessions left running", f"{running} sessions")
    if integrity != "ok" or foreign:
        miss("integrity", f"{integrity}, {len(foreign)} foreign key errors")

    session_host = dict(q("SELECT id, host FROM sessions"))
    started = {int(p.name): p.read_text() for p in (tmp / "work" / "started").iterdir()}
    owed = excused = 0
    for marker in (tmp / "work" / "done").iterdir():
        if not marker.name.isdigit():  # a marker still being written when its step was killed
            continue
        run, at = int(marker.name), float(marker.read_text())
        sid, _ = runs[run]
        host = session_host[sid]
        life = next((x for e in fleet if e.host == host for x in e.lives if x["start"] <= at <= (x["end"] or at)), None)
        if life is None or (life["how"] == "SIGKILL" and life["end"] < owed_by(at, holds)):
            continue  # its engine died before it could be expected to have recorded the reply
        if sid in ended_by_call and ended_by_call[sid] <= owed_by(at, holds):
            excused += 1
            continue
        owed += 1
        if not any(c.startswith(f"reply-{run}.") for c in await history(sid)):
            miss("finished steps' replies", f"run {run} ({started.get(run)}) of session {sid}")
    await ws.close()

    alive = escaped(tag)
    if alive:
        miss("escaped processes", f"{len(alive)} alive, e.g. pid {alive[0]}")
    for engines in fleet:
        if engines.rivals["ran"]:
            miss("rival engines that ran", json.dumps(engines.rivals.get("odd")))
    summaries = [json.loads(p.read_text()) for p in logs.glob("worker-*.summary")]
    errors = [e for s in summaries for e in s["errors"]]
    if errors:
        miss("worker errors (not refusals)", errors[0])
    for index in died:
        miss("workers that died", f"worker {index}: an error escaped its loop (its traceback is on stderr)")
    died = [x for e in fleet for x in e.lives if "died" in x]
    if died:
        miss("engines that ended on their own", f"pid {died[0]['pid']} (exit {died[0]['died']}): see its log")
    stuck = sum(1 for e in fleet for x in e.lives if x.get("stuck"))
    if stuck:
        miss("engines that did not stop", f"{stuck}")
    tracebacks = []
    for log in sorted(logs.glob("engine-*.log")):
        text = log.read_text(errors="replace")
        if "Traceback" in text:  # said whole where it is seen: the folder is gone after the run
            tracebacks.append(log.name)
            print(f"{log.name}:\n{text[text.index('Traceback'):][-2500:]}", file=sys.stderr)
    if tracebacks:
        miss("engine tracebacks", ", ".join(tracebacks))
    return {
        "acknowledged": len(acks), "lost": sum(lost.values()), "lost_by_kind": dict(lost), "examples": examples,
        "tried": sum((collections.Counter(s["tried"]) for s in summaries), collections.Counter()),
        "refused": sum((collections.Counter(s["refused"]) for s in summaries), collections.Counter()),
        "runs": sum(outcomes.values()), "outcomes": outcomes, "confined": confined,
        "behaviours": collections.Counter(started.values()), "replies_owed": owed, "replies_excused": excused,
        "integrity": integrity,
    }


# -- the whole -------------------------------------------------------------------------------

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--sessions", type=int, default=12)
    parser.add_argument("--kill-every", type=float, default=10, help="seconds between engine kills, on average")
    parser.add_argument("--tracker", default="auto", choices=["auto", "cgroup", "marker"])
    parser.add_argument("--store", default="sqlite", choices=["sqlite", "postgresql"],
                        help="postgresql: a server of the run's own, two hosts, the server stopped now and then")
    parser.add_argument("--tiny", action="store_true", help="20 s, 2 workers, 6 sessions, a kill every 4 s (for CI)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--json-out")
    parser.add_argument("--keep", action="store_true", help="keep the workspace and logs (the folder is printed)")
    parser.add_argument("--worker", nargs=8, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        db, index, until, seed, log, folder, runner, cap = args.worker
        hosts = HOSTS if db.startswith("postgresql://") else [this_host()]
        os.environ["PROCESSION_HOST"] = hosts[int(index) % len(hosts)]  # its spawns are that host's
        asyncio.run(worker(db, int(index), float(until), int(seed), Path(log), Path(folder), runner, int(cap)))
        return 0
    if args.tiny:
        args.minutes, args.workers, args.sessions, args.kill_every = 1 / 3, 2, 6, 4
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    tag = f"chaos-step-{uuid.uuid4().hex[:12]}"
    tmp = Path(tempfile.mkdtemp(prefix="procession-chaos-"))
    server = None
    try:
        if args.keep:
            print(f"keeping {tmp}", file=sys.stderr)
        logs, folder, watched = tmp / "logs", tmp / "work", tmp / "watched"
        if args.store == "postgresql":
            sys.path.insert(0, str(HERE.parent / "tests"))
            from support.postgres import Server

            server = Server()
            store, hosts = Store(server.workspace(), server), HOSTS
        else:
            store, hosts = Store(str(tmp / "chaos.db")), [this_host()]
        for d in (logs, folder, watched, folder / "done", folder / "started"):
            d.mkdir()
        step = tmp / "chaos_step.py"
        step.write_text((HERE / "chaos_step.py").read_text())
        runner = f"command:{PY} {step} {tag}"
        asyncio.run(build(store.db, args.sessions, runner, folder, watched, hosts))
        began = time.time()
        until = began + args.minutes * 60
        fleet = [Engines(store, host, args.tracker, logs) for host in hosts]
        for engines in fleet:
            engines.start()
        workers = [subprocess.Popen([PY, __file__, "--worker", store.db, str(i), str(until), str(seed + i),
                                     str(logs / f"worker-{i}.jsonl"), str(folder), runner, str(args.sessions * 4)])
                   for i in range(args.workers)]
        holds: list[dict[str, Any]] = []
        holder = threading.Thread(target=hold_locks, args=(store, until, random.Random(seed - 1), holds), daemon=True)
        holder.start()
        next_kill = time.time() + rng.uniform(0.5, 1.5) * args.kill_every
        next_rival = time.time() + rng.uniform(0.2, 0.8) * args.kill_every
        touches = 0
        while time.time() < until:
            time.sleep(0.5)
            if int(time.time() - began) // 2 > touches:
                touches += 1
                (watched / "input.txt").write_text(str(touches))
            if time.time() >= next_kill:
                engines = rng.choice(fleet)
                sig = signal.SIGKILL if rng.random() < 0.8 else signal.SIGTERM
                print(f"{time.time() - began:6.1f} s  engine {engines.lives[-1]['pid']} of {engines.host} <- {sig.name}",
                      file=sys.stderr, flush=True)
                engines.stop(sig)
                time.sleep(rng.uniform(0, 2))
                engines.start()
                next_kill = time.time() + rng.uniform(0.5, 1.5) * args.kill_every
                next_rival = time.time() + rng.uniform(0.2, 0.8) * args.kill_every
            elif time.time() >= next_rival:
                rng.choice(fleet).rival()
                next_rival = next_kill + 1
        died = [i for i, w in enumerate(workers) if w.wait(timeout=120) != 0]  # a raw error escaped a call
        holder.join(timeout=30)
        for engines in fleet:
            engines.stop(signal.SIGKILL)  # the last kill: the next engine must clean up after it
            engines.start()
        time.sleep(4)
        for engines in fleet:
            engines.stop(signal.SIGTERM)
        time.sleep(0.5)
        result = asyncio.run(check(store, logs, tmp, fleet, tag, holds, died))
        for pid in escaped(tag):  # leave the machine as found
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    finally:
        if server is not None:
            server.stop()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    kills = collections.Counter(x["how"] for e in fleet for x in e.lives)
    rivals = {k: sum(e.rivals[k] for e in fleet) for k in ("tried", "refused", "ran")}
    outages = [h for h in holds if h["kind"] == "outage"]
    result.update(seed=seed, minutes=args.minutes, workers=args.workers, tracker=args.tracker, store=args.store,
                  hosts=hosts, outages=len(outages), outage_s=round(sum(h["seconds"] for h in outages), 1),
                  engine_kills=kills.get("SIGKILL", 0), engine_stops=kills.get("SIGTERM", 0), rivals=rivals,
                  lock_holds=len(holds), lock_held_s=round(sum(h["seconds"] for h in holds), 1),
                  lock_longest_s=round(max((h["seconds"] for h in holds), default=0), 1))
    report(result)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=2, default=str))
    return 1 if result["lost"] else 0


def report(r: dict[str, Any]) -> None:
    print(f"chaos: {r['minutes']:g} min, {r['workers']} workers, tracker {r['tracker']}, store {r['store']}"
          f" (hosts {', '.join(r['hosts'])}), seed {r['seed']}")
    tried = ", ".join(f"{k} {v}" for k, v in sorted(r["tried"].items(), key=lambda kv: -kv[1]))
    print(f"  calls tried {sum(r['tried'].values())} ({tried})")
    print(f"  acknowledged {r['acknowledged']}, refused {sum(r['refused'].values())} "
          f"({', '.join(f'{k} {v}' for k, v in r['refused'].items())})")
    print(f"  engine: {r['engine_kills']} SIGKILLs, {r['engine_stops']} SIGTERMs, rivals tried {r['rivals']['tried']} "
          f"(refused {r['rivals']['refused']})")
    print(f"  write lock / snapshot held, or the server stopped, {r['lock_holds']} times, {r['lock_held_s']} s in"
          f" all, longest {r['lock_longest_s']} s; of them {r['outages']} outages of the server, {r['outage_s']} s")
    print(f"  runs {r['runs']} ({', '.join(f'{k} {v}' for k, v in r['outcomes'].items())}),"
          f" {r['confined']} of them confined by the kernel")
    print(f"  misbehaving steps: {', '.join(f'{k} {v}' for k, v in sorted(r['behaviours'].items()))}")
    print(f"  finished steps whose reply was owed {r['replies_owed']}, excused (session ended by a call) "
          f"{r['replies_excused']}")
    print(f"{'check':<32} {'lost':>6}  example")
    for what in ("messages", "memory values", "sessions", "forks", "checkpoints", "journal rows", "runs left open",
                 "sessions left running", "runs of one session at once", "runs on another host",
                 "finished steps' replies", "escaped processes", "rival engines that ran",
                 "worker errors (not refusals)", "workers that died", "engines that ended on their own", "engines that did not stop",
                 "engine tracebacks", "integrity"):
        print(f"{what:<32} {r['lost_by_kind'].get(what, 0):>6}  {r['examples'].get(what, '')}")
    for what, n in r["lost_by_kind"].items():
        if what.endswith("(session gone)"):
            print(f"{what:<32} {n:>6}  {r['examples'][what]}")
    print(json.dumps(r, default=str))
    print(f"lost: {r['lost']}")


if __name__ == "__main__":
    sys.exit(main())
