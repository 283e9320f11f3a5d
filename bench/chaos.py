"""Chaos: random calls from several processes while the engine is killed, the workspace is
locked for seconds at a time and the steps misbehave; then a count of what was lost.

    python bench/chaos.py [--minutes 5] [--workers 3] [--sessions 12] [--kill-every 10]
                          [--tracker auto|cgroup|marker] [--tiny] [--seed N] [--json-out FILE]

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

Then a last engine starts (it must clean up after the one killed before it) and stops, and
everything is checked: every acknowledged message, memory value, session, fork and
checkpoint is there; the journal has exactly one row per acknowledged call; no run is left
open and no session running; no step process is alive anywhere (found by a tag on their
command lines); every step that finished while its engine lived long enough after has its
reply in the history (unless a call ended the session first); no rival engine ran; no
worker met an error that was not a refusal; ``PRAGMA integrity_check`` says ok. It prints
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
#: How long an engine must have lived after a step finished to owe its reply, beyond the
#: time the workspace was locked meanwhile.
GRACE_S = 3.0


# -- the workers ---------------------------------------------------------------------------

async def worker(db: Path, index: int, until: float, seed: int, log: Path, folder: Path, runner: str,
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
    """The engine process: started, killed, started again; rivals tried beside it."""

    def __init__(self, db: Path, tracker: str, logs: Path) -> None:
        self.db, self.tracker, self.logs = db, tracker, logs
        self.proc: subprocess.Popen[bytes] | None = None
        self.lives: list[dict[str, Any]] = []  # start, end, how it ended
        self.rivals = {"tried": 0, "refused": 0, "ran": 0}

    def _argv(self) -> list[str]:
        return [PY, "-m", "procession", "--db", str(self.db), "run", "--slots", "3", "--tracker", self.tracker]

    def start(self) -> None:
        err = (self.logs / f"engine-{len(self.lives)}.log").open("wb")
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
                with sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=1) as conn:
                    row = conn.execute("SELECT pid FROM engines").fetchone()
                if row and row[0] == self.proc.pid:
                    return True
            except sqlite3.Error:
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


def hold_locks(db: Path, until: float, rng: random.Random, holds: list[dict[str, Any]]) -> None:
    while time.time() < until:
        time.sleep(rng.uniform(2, 8))
        if time.time() >= until:
            break
        kind = rng.choice(["write", "write", "read"])
        conn = sqlite3.connect(db, timeout=60, isolation_level=None)
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


# -- set-up and the checks ------------------------------------------------------------------

async def build(db: Path, sessions: int, runner: str, folder: Path, watched: Path) -> None:
    from procession import Workspace

    ws = await Workspace.open(db, actor="setup")
    for i in range(sessions):
        sid = (await ws.spawn(f"chaos {i}", f"agent{i % 3}", runner=runner, timeout=12, cwd=str(folder))).sid
        await ws.send(sid, f"session {i} begins")
        if i % 3 == 0:
            await ws.trigger_add(sid, "every", [f"{3 + i % 5}s"])
        if i % 4 == 1:
            await ws.trigger_add(sid, "watch", [str(watched)], debounce_ms=200)
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
    ``GRACE_S`` later, plus the time the write lock was held meanwhile."""
    due = at + GRACE_S
    for h in sorted(holds, key=lambda h: h["start"]):
        if h["kind"] == "write" and h["start"] <= due and h["end"] >= at:
            due = max(due, h["end"] + GRACE_S)
    return due


async def check(db: Path, logs: Path, tmp: Path, engines: Engines, tag: str,
                holds: list[dict[str, Any]]) -> dict[str, Any]:
    from procession import Workspace
    from procession.model.errors import ProcessionError

    ws = await Workspace.open(db, actor="check")
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

    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        journaled = collections.Counter(
            {(actor, call): n for actor, call, n in conn.execute(
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
        open_runs = conn.execute("SELECT count(*) FROM runs WHERE ended IS NULL").fetchone()[0]
        running = conn.execute("SELECT count(*) FROM sessions WHERE state = 'running'").fetchone()[0]
        outcomes = dict(conn.execute("SELECT coalesce(outcome, 'open'), count(*) FROM runs GROUP BY 1").fetchall())
        confined = conn.execute("SELECT count(*) FROM runs WHERE confinement LIKE 'landlock%'").fetchone()[0]
        runs = {r: (sid, ended) for r, sid, ended in conn.execute("SELECT id, session_id, ended FROM runs")}
        ended_by_call = {sid: ts for sid, ts in conn.execute(  # cancelled, or merged away (the source is other_id)
            "SELECT sid, min(ts) FROM (SELECT session_id AS sid, ts FROM journal WHERE call = 'cancel'"
            " UNION ALL SELECT other_id, ts FROM journal WHERE call = 'merge') GROUP BY sid")}
        integrity = conn.execute("PRAGMA integrity_check").fetchone()[0]
        foreign = conn.execute("PRAGMA foreign_key_check").fetchall()
    if open_runs:
        miss("runs left open", f"{open_runs} runs")
    if running:
        miss("sessions left running", f"{running} sessions")
    if integrity != "ok" or foreign:
        miss("integrity", f"{integrity}, {len(foreign)} foreign key errors")

    started = {int(p.name): p.read_text() for p in (tmp / "work" / "started").iterdir()}
    owed = excused = 0
    for marker in (tmp / "work" / "done").iterdir():
        if not marker.name.isdigit():  # a marker still being written when its step was killed
            continue
        run, at = int(marker.name), float(marker.read_text())
        life = next((x for x in engines.lives if x["start"] <= at <= (x["end"] or at)), None)
        if life is None or (life["how"] == "SIGKILL" and life["end"] < owed_by(at, holds)):
            continue  # its engine died before it could be expected to have recorded the reply
        sid, _ = runs[run]
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
    if engines.rivals["ran"]:
        miss("rival engines that ran", json.dumps(engines.rivals.get("odd")))
    summaries = [json.loads(p.read_text()) for p in logs.glob("worker-*.summary")]
    errors = [e for s in summaries for e in s["errors"]]
    if errors:
        miss("worker errors (not refusals)", errors[0])
    died = [x for x in engines.lives if "died" in x]
    if died:
        miss("engines that ended on their own", f"pid {died[0]['pid']} (exit {died[0]['died']}): see its log")
    stuck = sum(1 for x in engines.lives if x.get("stuck"))
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
    parser.add_argument("--tiny", action="store_true", help="30 s, 2 workers, 6 sessions, a kill every 5 s (for CI)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--json-out")
    parser.add_argument("--keep", action="store_true", help="keep the workspace and logs (the folder is printed)")
    parser.add_argument("--worker", nargs=8, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        db, index, until, seed, log, folder, runner, cap = args.worker
        asyncio.run(worker(Path(db), int(index), float(until), int(seed), Path(log), Path(folder), runner, int(cap)))
        return 0
    if args.tiny:
        args.minutes, args.workers, args.sessions, args.kill_every = 0.5, 2, 6, 5
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    tag = f"chaos-step-{uuid.uuid4().hex[:12]}"
    tmp = Path(tempfile.mkdtemp(prefix="procession-chaos-"))
    try:
        if args.keep:
            print(f"keeping {tmp}", file=sys.stderr)
        db, logs, folder, watched = tmp / "chaos.db", tmp / "logs", tmp / "work", tmp / "watched"
        for d in (logs, folder, watched, folder / "done", folder / "started"):
            d.mkdir()
        step = tmp / "chaos_step.py"
        step.write_text((HERE / "chaos_step.py").read_text())
        runner = f"command:{PY} {step} {tag}"
        asyncio.run(build(db, args.sessions, runner, folder, watched))
        began = time.time()
        until = began + args.minutes * 60
        engines = Engines(db, args.tracker, logs)
        engines.start()
        workers = [subprocess.Popen([PY, __file__, "--worker", str(db), str(i), str(until), str(seed + i),
                                     str(logs / f"worker-{i}.jsonl"), str(folder), runner, str(args.sessions * 4)])
                   for i in range(args.workers)]
        holds: list[dict[str, Any]] = []
        holder = threading.Thread(target=hold_locks, args=(db, until, random.Random(seed - 1), holds), daemon=True)
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
                sig = signal.SIGKILL if rng.random() < 0.8 else signal.SIGTERM
                print(f"{time.time() - began:6.1f} s  engine {engines.lives[-1]['pid']} <- {sig.name}",
                      file=sys.stderr, flush=True)
                engines.stop(sig)
                time.sleep(rng.uniform(0, 2))
                engines.start()
                next_kill = time.time() + rng.uniform(0.5, 1.5) * args.kill_every
                next_rival = time.time() + rng.uniform(0.2, 0.8) * args.kill_every
            elif time.time() >= next_rival:
                engines.rival()
                next_rival = next_kill + 1
        for w in workers:
            w.wait(timeout=120)
        holder.join(timeout=30)
        engines.stop(signal.SIGKILL)  # the last kill: the next engine must clean up after it
        engines.start()
        time.sleep(4)
        engines.stop(signal.SIGTERM)
        time.sleep(0.5)
        result = asyncio.run(check(db, logs, tmp, engines, tag, holds))
        for pid in escaped(tag):  # leave the machine as found
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    kills = collections.Counter(x["how"] for x in engines.lives)
    result.update(seed=seed, minutes=args.minutes, workers=args.workers, tracker=args.tracker,
                  engine_kills=kills.get("SIGKILL", 0), engine_stops=kills.get("SIGTERM", 0), rivals=engines.rivals,
                  lock_holds=len(holds), lock_held_s=round(sum(h["seconds"] for h in holds), 1),
                  lock_longest_s=round(max((h["seconds"] for h in holds), default=0), 1))
    report(result)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=2, default=str))
    return 1 if result["lost"] else 0


def report(r: dict[str, Any]) -> None:
    print(f"chaos: {r['minutes']:g} min, {r['workers']} workers, tracker {r['tracker']}, seed {r['seed']}")
    tried = ", ".join(f"{k} {v}" for k, v in sorted(r["tried"].items(), key=lambda kv: -kv[1]))
    print(f"  calls tried {sum(r['tried'].values())} ({tried})")
    print(f"  acknowledged {r['acknowledged']}, refused {sum(r['refused'].values())} "
          f"({', '.join(f'{k} {v}' for k, v in r['refused'].items())})")
    print(f"  engine: {r['engine_kills']} SIGKILLs, {r['engine_stops']} SIGTERMs, rivals tried {r['rivals']['tried']} "
          f"(refused {r['rivals']['refused']})")
    print(f"  write lock / snapshot held {r['lock_holds']} times, {r['lock_held_s']} s in all, "
          f"longest {r['lock_longest_s']} s")
    print(f"  runs {r['runs']} ({', '.join(f'{k} {v}' for k, v in r['outcomes'].items())}),"
          f" {r['confined']} of them confined by the kernel")
    print(f"  misbehaving steps: {', '.join(f'{k} {v}' for k, v in sorted(r['behaviours'].items()))}")
    print(f"  finished steps whose reply was owed {r['replies_owed']}, excused (session ended by a call) "
          f"{r['replies_excused']}")
    print(f"{'check':<32} {'lost':>6}  example")
    for what in ("messages", "memory values", "sessions", "forks", "checkpoints", "journal rows", "runs left open",
                 "sessions left running", "finished steps' replies", "escaped processes", "rival engines that ran",
                 "worker errors (not refusals)", "engines that ended on their own", "engines that did not stop",
                 "engine tracebacks", "integrity"):
        print(f"{what:<32} {r['lost_by_kind'].get(what, 0):>6}  {r['examples'].get(what, '')}")
    for what, n in r["lost_by_kind"].items():
        if what.endswith("(session gone)"):
            print(f"{what:<32} {n:>6}  {r['examples'][what]}")
    print(json.dumps(r, default=str))
    print(f"lost: {r['lost']}")


if __name__ == "__main__":
    sys.exit(main())
