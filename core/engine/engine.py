"""The engine: one per workspace, it runs steps, fires triggers and obeys the store.

The store says what should be (a session's state); the engine makes it so. It holds the
workspace lease, starts ready sessions into free run slots (highest priority first), and
watches the store for changes made by any process — ``PRAGMA data_version``, polled every
``POLL_S`` — to apply them to live steps: a suspended session's step is stopped in place
(SIGSTOP), a resumed one continued, an interrupted one stopped with SIGINT escalating to
SIGKILL, a cancelled one killed. Triggers are event-driven: one file watcher for the whole
workspace, timers for cron and interval triggers, and inbox / after triggers fired by the
calls that cause them. When an engine dies, the next one to take the lease kills what it
left running and puts its sessions back to sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import logging
import os
import signal
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..calls import watched
from ..model import runner_spec
from ..model.errors import ProcessionError, StoreBusy
from ..model.states import State
from ..model.text import plural
from ..store.sqlite import Store
from . import watch
from .ledger import CANCELLED, FAILED, INTERRUPTED, OK, TIMEOUT, Ledger, Orphan
from .runners import protocol
from .runners.http import HttpStep
from .runners.process import ProcessStep, StepResult

log = logging.getLogger("procession.engine")

POLL_S = 0.05
HEARTBEAT_S = 1.0
SAMPLE_S = 1.0
DEFAULT_SLOTS = 2
DEFAULT_GRACE_S = 2.0
DEFAULT_TIMEOUT_S = 1800.0
#: How many times the end of a run is tried when the workspace stays busy (about 2 minutes).
RECORD_ATTEMPTS = 30

Step = ProcessStep | HttpStep


@dataclass(slots=True)
class Live:
    """A step this engine is running."""

    sid: int
    run: int
    step: Step
    timeout: float | None
    intent: str | None = None
    task: asyncio.Task[None] | None = None
    stopper: asyncio.Task[None] | None = None
    proc: Any = None
    children: dict[int, Any] = field(default_factory=dict)


def proc_start(pid: int | None) -> float | None:
    """The start time of a process, to recognise it later (pids are reused)."""
    if pid is None:
        return None
    import psutil

    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:
        return None


def let_steps_be_interrupted() -> None:
    """Make sure steps start with SIGINT and SIGTERM at their defaults.

    A shell starts background jobs with SIGINT ignored, and an ignored signal stays ignored
    across ``exec``: every step would then shrug off an interrupt until the escalation kills
    it. A *caught* signal, though, is reset to its default in a child at ``exec``; so an
    ignored one here becomes a caught one that does nothing, which this process does not
    notice and its steps do not inherit.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(sig) == signal.SIG_IGN:
            signal.signal(sig, _ignore)


def _ignore(signum: int, frame: Any) -> None:
    pass


def next_due(kind: str, spec: dict[str, Any], base: float) -> float:
    """When a cron or interval trigger is next due after ``base`` (local time zone)."""
    if kind == "every":
        return base + float(spec["seconds"])
    from croniter import croniter

    start = datetime.datetime.fromtimestamp(base).astimezone()
    return float(croniter(spec["expr"], start).get_next(float))


class Engine:
    """Runs a workspace. ``await serve(stop)`` until ``stop`` is set."""

    def __init__(self, path: Path | str | None = None, *, slots: int = DEFAULT_SLOTS,
                 grace: float = DEFAULT_GRACE_S, only: set[int] | None = None, triggers: bool = True) -> None:
        if slots < 1:
            raise ProcessionError("an engine needs at least one run slot")
        self.path = path
        self.slots = slots
        self.grace = grace
        self.only = only
        self.with_triggers = triggers
        self.token = uuid.uuid4().hex
        self.ledger: Ledger | None = None
        self.live: dict[int, Live] = {}
        self.kick = asyncio.Event()
        self.stopping = False
        self.due: dict[int, tuple[float, str, int]] = {}
        self.watcher: watch.Watcher | None = None
        self._background: list[asyncio.Task[None]] = []
        self._stop: asyncio.Event | None = None

    # ------------------------------------------------------------------ life

    async def start(self) -> None:
        """Take the lease (or raise ``EngineBusy``), recover a dead engine's runs, catch up."""
        let_steps_be_interrupted()
        store = await Store.open(self.path)
        self.ledger = Ledger(store, actor="engine")
        try:
            took = await self.ledger.acquire(self.token, self.slots)
            log.info("engine %s holds %s with %s", os.getpid(), store.path, plural(self.slots, "slot"))
            if took.took_over:
                log.info("took over from engine pid %s", took.took_over["pid"])
            await self._recover()
            if self.with_triggers:
                self.watcher = watch.Watcher(self._watch_fired)
                await self._refresh_triggers(catch_up=True)
        except BaseException:
            await store.close()
            raise

    async def serve(self, stop: asyncio.Event) -> None:
        """Run until ``stop`` is set (or the lease is lost), then shut down cleanly."""
        self._stop = stop
        if self.ledger is None:
            await self.start()
        self._background = [asyncio.ensure_future(self._heartbeat()), asyncio.ensure_future(self._sampler())]
        try:
            await self._loop(stop)
        finally:
            await self.shutdown()

    async def shutdown(self) -> None:
        """Interrupt live steps (recorded as interrupted), stop watching, release the lease."""
        if self.ledger is None:
            return
        self.stopping = True
        for live in list(self.live.values()):
            self._interrupt(live, "shutdown")
        tasks = [live.task for live in self.live.values() if live.task]
        if tasks:
            await asyncio.wait(tasks, timeout=self.grace * 3 + 2)
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        try:
            if self.watcher:
                await self.watcher.close()
            with contextlib.suppress(ProcessionError):
                await self.ledger.release(self.token)
        finally:
            await self.ledger.close()  # an open aiosqlite connection would keep the process from exiting
            self.ledger = None
        log.info("engine %s stopped", os.getpid())

    async def _loop(self, stop: asyncio.Event) -> None:
        assert self.ledger is not None
        seen = None
        stopped = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set():
                try:
                    version = await self.ledger.store.data_version()
                    if version != seen or self.kick.is_set():
                        self.kick.clear()
                        seen = version
                        await self._reconcile()
                        if self.with_triggers:
                            await self._refresh_triggers()
                        await self._schedule()
                    await self._fire_due()
                except ProcessionError as exc:  # the workspace held by another process too long: try again
                    log.warning("engine loop: %s", exc)
                    seen = None
                wait = POLL_S
                if self.due:
                    wait = max(0.0, min(wait, min(d for d, _, _ in self.due.values()) - time.time()))
                kicked = asyncio.ensure_future(self.kick.wait())
                await asyncio.wait([kicked, stopped], timeout=wait, return_when=asyncio.FIRST_COMPLETED)
                kicked.cancel()
        finally:
            stopped.cancel()

    async def _heartbeat(self) -> None:
        assert self.ledger is not None
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            try:
                held = await self.ledger.heartbeat(self.token)
            except ProcessionError as exc:
                log.warning("heartbeat failed: %s", exc)
                continue
            if not held:
                log.error("another engine took the lease; stopping")
                if self._stop:
                    self._stop.set()
                return

    # ------------------------------------------------------------------ recovery

    async def _recover(self) -> None:
        """Kill the step process groups a dead engine left, then record their runs as lost."""
        assert self.ledger is not None
        orphans = await self.ledger.orphans(self.token)
        for orphan in orphans:
            _kill_orphan(orphan)
        result = await self.ledger.recover(self.token)
        if result.lost_runs or result.sessions:
            log.info("recovered: runs %s lost, sessions %s back to sleep", result.lost_runs, result.sessions)

    # ------------------------------------------------------------------ scheduling

    async def _schedule(self) -> None:
        assert self.ledger is not None
        free = self.slots - len(self.live)
        if free <= 0 or self.stopping:
            return
        for row in await self.ledger.ready(free + len(self.live), self.only):
            if free <= 0:
                break
            if row["id"] in self.live:
                continue
            if row["context_tokens"] > row["window"]:
                await self._fail_to_start(
                    row, f"its context ({row['context_tokens']} tokens) is over its window ({row['window']}):"
                         f" compress it (procession compress {row['id']}) or migrate it to a larger window")
                continue
            if await self._launch(row):
                free -= 1

    async def _launch(self, row: Any) -> bool:
        assert self.ledger is not None
        sid = row["id"]
        spec = runner_spec.parse(row["runner"])
        cwd = await self.ledger.workdir(sid)
        env = {**os.environ, "PROCESSION_SESSION": str(sid), "PROCESSION_DB": str(self.ledger.path)}
        kind = HttpStep if spec.kind == "openai" else ProcessStep
        try:
            step: Step = await kind.start(spec, cwd, env)
        except OSError as exc:
            await self._fail_to_start(row, f"cannot start the step in {cwd}: {exc.strerror or exc}")
            return False
        try:
            start = await self.ledger.start_run(sid, runner=row["runner"], engine=self.token, pid=step.pid,
                                                proc_start=proc_start(step.pid))
        except BaseException as exc:  # not claimed (or cancelled): the launched step must not linger
            step.kill()
            if isinstance(step, ProcessStep):
                await step.wait()
            if isinstance(exc, ProcessionError):
                return False
            raise
        live = Live(sid, start.run, step, row["timeout"] or DEFAULT_TIMEOUT_S)
        self.live[sid] = live
        live.task = asyncio.ensure_future(self._supervise(live, start.document))
        log.info("run %d of session %d started (%s, pid %s)", start.run, sid, row["runner"], step.pid)
        return True

    async def _fail_to_start(self, row: Any, error: str) -> None:
        """Record a run that could not even start, so the user sees why."""
        assert self.ledger is not None
        try:
            start = await self.ledger.start_run(row["id"], runner=row["runner"], engine=self.token, pid=None,
                                                proc_start=None)
            await self.ledger.finish_run(row["id"], start.run, FAILED, exit_code=None, events=protocol.Events(),
                                         error=error)
        except ProcessionError:
            pass
        log.warning("session %d: %s", row["id"], error)

    async def _supervise(self, live: Live, document: bytes) -> None:
        """Feed the step, wait for it, record the outcome. Never raises: a bad step fails its run."""
        assert self.ledger is not None
        loop = asyncio.get_running_loop()
        timer = loop.call_later(live.timeout, self._interrupt, live, "timeout") if live.timeout else None
        result = StepResult(None, protocol.Output(), "")
        try:
            await live.step.feed(document)
            result = await live.step.wait()
        except Exception as exc:  # noqa: BLE001 - keep the engine up whatever a step does
            log.exception("run %d of session %d broke", live.run, live.sid)
            result.stderr = f"{type(exc).__name__}: {exc}"
            live.step.kill()
        finally:
            if timer:
                timer.cancel()
        outcome = {"cancel": CANCELLED, "timeout": TIMEOUT, None: OK if result.exit_code == 0 else FAILED}.get(
            live.intent, INTERRUPTED)
        events = protocol.parse(result.output)
        notes = []
        if outcome == FAILED:
            notes.append(f"exit status {result.exit_code}" if result.exit_code is not None else "no exit status")
        if result.stderr.strip() and outcome != OK:
            notes.append(result.stderr.strip())
        if result.output.cut:
            notes.append(f"{result.output.cut} bytes of output cut (kept the first and last"
                         f" {protocol.HEAD_BYTES // 1024} KiB)")
        try:
            await self._record(live, outcome, result.exit_code, events, "\n".join(notes))
        finally:
            self.live.pop(live.sid, None)
            self.kick.set()
        log.info("run %d of session %d ended: %s", live.run, live.sid, outcome)

    async def _record(self, live: Live, outcome: str, exit_code: int | None, events: protocol.Events,
                      error: str) -> None:
        """Record the end of a run, however long the workspace is held by others: a run left
        open would leave its session ``running`` with no step."""
        assert self.ledger is not None
        delay = 0.5
        for attempt in range(RECORD_ATTEMPTS):
            try:
                await self.ledger.finish_run(live.sid, live.run, outcome, exit_code=exit_code, events=events,
                                             error=error, requeue=live.intent == "suspend")
                return
            except StoreBusy as exc:
                log.warning("run %d not recorded yet (%s); retrying", live.run, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
            except ProcessionError as exc:
                log.error("cannot record run %d: %s", live.run, exc)
                return
            except Exception as exc:  # noqa: BLE001 - output that cannot be stored still ends the run
                log.error("cannot record the output of run %d: %s", live.run, exc)
                events, outcome = protocol.Events(), FAILED
                error = f"the engine could not record this run's output: {exc}"
        log.error("run %d of session %d could not be recorded; the next engine start will", live.run, live.sid)

    def _interrupt(self, live: Live, why: str) -> None:
        if live.intent is not None and why != "cancel":
            return
        live.intent = why
        if why == "cancel":
            live.step.kill()
        elif live.stopper is None:
            live.stopper = asyncio.ensure_future(live.step.interrupt(self.grace))

    async def _reconcile(self) -> None:
        """Make live steps match what the store says their sessions should be."""
        assert self.ledger is not None
        if not self.live:
            return
        async with self.ledger.store.snapshot() as tx:
            marks = ",".join("?" * len(self.live))
            rows = await tx.all(f"SELECT id, state FROM sessions WHERE id IN ({marks})", list(self.live))
        states = {r["id"]: State(r["state"]) for r in rows}
        for sid, live in list(self.live.items()):
            state = states.get(sid, State.TERMINATED)
            if state is State.RUNNING:
                if live.step.frozen:
                    live.step.thaw()
            elif state is State.SUSPENDED:
                if live.step.freezable:
                    if not live.step.frozen:
                        live.step.freeze()
                else:
                    self._interrupt(live, "suspend")
            elif state is State.TERMINATED:
                self._interrupt(live, "cancel")
            else:
                self._interrupt(live, "interrupt")

    async def _sampler(self) -> None:
        """CPU% and RSS of live process steps (leader and descendants), into the store."""
        import psutil

        assert self.ledger is not None
        while True:
            await asyncio.sleep(SAMPLE_S)
            stats = []
            for live in list(self.live.values()):
                if live.step.pid is None:
                    continue
                try:
                    if live.proc is None:
                        live.proc = psutil.Process(live.step.pid)
                        live.proc.cpu_percent(None)
                        continue
                    cpu, rss = live.proc.cpu_percent(None), live.proc.memory_info().rss
                    for child in live.proc.children(recursive=True):
                        known = live.children.setdefault(child.pid, child)
                        with contextlib.suppress(psutil.Error):
                            cpu += known.cpu_percent(None)
                            rss += known.memory_info().rss
                    stats.append((cpu, rss, live.run))
                except psutil.Error:
                    continue
            if stats:
                with contextlib.suppress(ProcessionError):
                    await self.ledger.sample(stats)

    # ------------------------------------------------------------------ triggers

    async def _refresh_triggers(self, catch_up: bool = False) -> None:
        """Load armed triggers: arm the watcher and the timers; on start, catch up."""
        assert self.ledger is not None and self.watcher is not None
        rows = await self.ledger.armed_triggers()
        watched: dict[int, dict[str, Any]] = {}
        due: dict[int, tuple[float, str, int]] = {}
        for row in rows:
            spec = json.loads(row["spec"])
            if row["kind"] == "watch":
                watched[row["id"]] = spec
                if catch_up:
                    await self._catch_up_watch(row, spec)
            elif row["kind"] in ("cron", "every"):
                base = row["last_fired"] or row["created"]
                due[row["id"]] = (next_due(row["kind"], spec, base), row["kind"], row["session_id"])
        if self.only is None:
            self.watcher.update(watched)
        self.due = due

    async def _catch_up_watch(self, row: Any, spec: dict[str, Any]) -> None:
        """Fire once if the watched files changed while no engine ran."""
        assert self.ledger is not None
        now = await asyncio.to_thread(watched.scan, spec["paths"])
        before = json.loads(row["state"]) if row["state"] else None
        paths = watched.changed(before, now)
        if before is None:
            await self.ledger.remember(row["id"], now)
        elif paths is not None:
            result = await self.ledger.fire(row["id"], {"paths": paths[: watch.PATHS_PER_FIRING], "catch_up": True},
                                            state=now)
            log.info("trigger %d (watch) caught up: %s changed while no engine ran: %s", row["id"],
                     plural(len(paths), "path"), result)

    async def _fire_due(self) -> None:
        assert self.ledger is not None
        now = time.time()
        for tid, (when, kind, sid) in list(self.due.items()):
            if when > now or (self.only is not None and sid not in self.only):
                continue
            cause: dict[str, Any] = {"due": when}
            if now - when > 60:
                cause["catch_up"] = True
            result = await self.ledger.fire(tid, cause)
            log.info("trigger %d (%s) fired for session %d: %s", tid, kind, sid, result)
            self.due.pop(tid)
            self.kick.set()

    async def _watch_fired(self, tid: int, paths: list[str], more: int) -> None:
        assert self.ledger is not None and self.watcher is not None
        trigger = self.watcher.watched.get(tid)
        if trigger is None:
            return
        fingerprint = await asyncio.to_thread(watched.scan, trigger.paths)
        cause: dict[str, Any] = {"paths": paths}
        if more:
            cause["more"] = more
        try:
            result = await self.ledger.fire(tid, cause, state=fingerprint)
        except ProcessionError as exc:
            log.warning("trigger %d (watch) could not fire (%s); its paths wait for the next window", tid, exc)
            self.watcher.dispatch(paths)
            return
        log.info("trigger %d (watch) fired: %s changed: %s", tid, plural(len(paths) + more, "path"), result)
        self.kick.set()


def _kill_orphan(orphan: Orphan) -> None:
    """Kill a dead engine's step group, if the pid is still that step (not a reused pid)."""
    if orphan.pid is None:
        return
    started = proc_start(orphan.pid)
    if started is None or orphan.proc_start is None or abs(started - orphan.proc_start) > 1.0:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(orphan.pid, signal.SIGKILL)
    log.info("killed process group %d left by a dead engine (run %d)", orphan.pid, orphan.run)
