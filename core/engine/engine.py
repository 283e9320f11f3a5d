"""The engine: one per host of a workspace, it runs steps, fires triggers and obeys the store.

The store says what should be (a session's state); the engine makes it so. It holds its
host's lease (renewed by a thread of its own, ``lease.Heartbeat``), starts its host's ready
sessions into free run slots (highest priority first), and watches the store for changes made
by any process — SQLite's ``PRAGMA data_version``, looked at every ``POLL_S``, or PostgreSQL's
``NOTIFY``, which wakes it (``Store.hear``) — to apply them to live steps: a
suspended session's step is stopped in place, every process of it (``reaper``), a resumed one
continued at once, an interrupted one stopped with SIGINT escalating to SIGKILL, a cancelled
one killed. A suspended step gives up its run slot, as a stopped process gives up the CPU.
Triggers are event-driven (``triggers``). When an engine dies, the next one to take its host's
lease kills every process its runs left and puts their sessions back to sleep; no other host's
engine touches them (their processes and folders are on that host).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from ..model import agent_homes, bounds, environ, hosts, mcp_binding, own_files, runner_spec
from ..model.errors import EngineBusy, InvalidArgument, ProcessionError, StoreBusy
from ..model.states import State
from ..model.text import plural
from ..store import Store, open_store, rows
from . import confinement, follow, moving, reaper
from .lease import Heartbeat
from . import tracing as tracing_
from .notify import Notifier, Settings
from .notify import load as load_notify
from ..model.prices import Prices
from ..model.prices import load as load_prices
from .own_mcp import OwnServers
from .ledger import FAILED, Ledger, Orphan
from .running import LiveRun, Reader
from .runners import agents, protocol
from .runners.http import HttpStep
from .runners.process import ProcessStep, StepResult, argv
from .triggers import Triggers, next_due

__all__ = ["Engine", "next_due"]

T = TypeVar("T")
log = logging.getLogger("procession.engine")

POLL_S = 0.05
#: The longest the loop waits where the store wakes it on another's commit (``Store.hear``):
#: it looks anyway, then (a notification lost with a dropped connection is caught up then).
HEARD_S = 1.0
#: Where another's commit wakes the loop, the least time between two of its looks: the commits
#: heard meanwhile are taken in one look (as SQLite's ``POLL_S`` takes them), not one look each
#: in every engine of every host (ten engines spent their time looking, at a hundred commits a
#: second); what this engine's own steps do wakes it at once still (``kick``).
SETTLE_S = POLL_S
SAMPLE_S = 1.0
DEFAULT_SLOTS = 2
#: How long an engine stopped while it starts tries to give its lease back (else it lapses).
RELEASE_S = 5.0
DEFAULT_GRACE_S = 2.0
DEFAULT_TIMEOUT_S = 1800.0
#: How often sessions a budget suspended are looked at again (a new period resumes them).
BUDGET_LOOK_S = 60.0


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


def learn_exits_from_pidfds() -> None:
    """On Python 3.11, asyncio learns that a child exited from its pidfd, in the event loop
    (``PidfdChildWatcher``), as 3.12 does by itself: not from a thread per child blocked in
    ``waitpid`` (3.11's ``ThreadedChildWatcher``), a hundred threads for a hundred steps.

    Only from the main thread: the policy attaches its watcher to the main thread's loop (at
    each ``set_event_loop`` too, so a later loop there gets it); another thread's loop keeps the
    watcher it has. Nothing changes where pidfds do not work (the threads stay)."""
    if sys.version_info >= (3, 12) or threading.current_thread() is not threading.main_thread():
        return
    if isinstance(watcher := asyncio.get_child_watcher(), asyncio.PidfdChildWatcher) and watcher.is_active():
        return  # attached to this loop already: attached again, it would forget the children it waits for
    try:
        os.close(os.pidfd_open(os.getpid()))
    except (AttributeError, OSError):
        return
    pidfds = asyncio.PidfdChildWatcher()
    pidfds.attach_loop(asyncio.get_running_loop())
    asyncio.set_child_watcher(pidfds)  # the threads of the one it replaces end with their children


class Engine:
    """Runs a workspace. ``await serve(stop)`` until ``stop`` is set.

    ``tracker`` says how a run's processes are followed: ``auto`` (a cgroup where one can be
    made here, else the environment marker), ``cgroup`` or ``marker``; ``notify``: where
    notifications go, ``prices``: what the tokens of a runner that says no cost cost (default
    for both: the user's config file, ``notify.load``, ``prices.load``)."""

    def __init__(self, path: Path | str | None = None, *, slots: int = DEFAULT_SLOTS,
                 grace: float = DEFAULT_GRACE_S, only: set[int] | None = None, triggers: bool = True,
                 tracker: str = "auto", notify: Settings | None = None, prices: Prices | None = None,
                 tracing: tracing_.Settings | None = None, exporter: Any = None) -> None:
        if slots < 1:
            raise ProcessionError("an engine needs at least one run slot")
        self.path = path
        self.slots = slots
        self.grace = grace
        self.only = only
        self.with_triggers = triggers
        self.tracker_mode = tracker
        self.notify = notify  # None: the user's config file says (``notify.load``)
        self.prices = prices or Prices()  # read from the config file at start when not given
        self._read_prices = prices is None
        self.notifier: Notifier | None = None
        self.tracing = tracing  # None: the user's config file, else the OTEL_* variables, say (``tracing.load``)
        self.exporter = exporter  # where spans go instead of the configured endpoint (the tests')
        self.tracer: tracing_.Tracer | None = None
        self.token = uuid.uuid4().hex
        self.ledger: Ledger | None = None
        self.live: dict[int, LiveRun] = {}
        self.kick = asyncio.Event()
        self.stopping = False
        self.triggers: Triggers | None = None
        self.follower: follow.Follower | None = None
        self.heartbeat: Heartbeat | None = None
        self.lost: str = ""  # why the engine stopped on its own (the lease taken, the file gone)
        self.backoff_until: float | None = None
        self.budget_look: float | None = None  # when to look again at sessions a budget holds
        self._background: list[asyncio.Task[None]] = []
        self.moves: asyncio.Task[None] | None = None  # this host's part of moves (``moving.step``), one round at a time
        self.moves_again = False  # a change came during the round: look again after it
        self.launching: set[reaper.Tracker] = set()  # trackers of steps started, not yet claimed
        self._stop: asyncio.Event | None = None

    # ------------------------------------------------------------------ life

    async def start(self) -> None:
        """Take the lease (or raise ``EngineBusy``), start beating, recover a dead engine's
        runs, catch up on triggers. The heartbeat starts first: nothing the engine does at
        start-up delays it."""
        let_steps_be_interrupted()
        learn_exits_from_pidfds()
        store = await _patiently(lambda: open_store(self.path))  # the server may go between the command's look and this
        reaper.hold()
        self.ledger = Ledger(store, actor="engine")
        try:
            ledger = self.ledger
            took = await _patiently(lambda: ledger.acquire(self.token, self.slots, proc_start(os.getpid())))
            store.fence = (hosts.this(), self.token)  # from now on, a write is refused once the lease is not ours
            store.interest = hosts.this()  # the commits of other hosts' engines are theirs to look at
            loop = asyncio.get_running_loop()
            self.heartbeat = Heartbeat(store.path, self.token, lambda why: loop.call_soon_threadsafe(self._give_up, why))
            self.heartbeat.start()
            log.info("engine %s of host %s holds %s with %s", os.getpid(), hosts.this(), store.path,
                     plural(self.slots, "slot"))
            if took.took_over:
                log.info("took over from engine pid %s", took.took_over["pid"])
            await _patiently(self._recover)
            self.notifier = Notifier(store, self.notify if self.notify is not None else load_notify())
            if self._read_prices:
                self.prices = load_prices()
                for problem in self.prices.problems:
                    log.warning("%s", problem)
            await _patiently(self.notifier.start)
            self.tracer = self._tracer(ledger)
            if self.tracer is not None:
                await self.tracer.start(time.time())
            if self.with_triggers:
                triggers = self.triggers = Triggers(self.ledger, self._watch_fired, watch=self.only is None,
                                                    kick=self.kick.set)
                await _patiently(lambda: triggers.refresh(catch_up=True))
                follower = self.follower = follow.Follower(self.ledger, lambda sid: sid in self.live)
                await _patiently(follower.refresh)
        except BaseException:
            if self.heartbeat is not None:  # the lease was taken: given back (stopped while starting), if the store lets it
                self.heartbeat.stop()
                with contextlib.suppress(ProcessionError, OSError, TimeoutError):
                    await asyncio.wait_for(ledger.release(self.token), RELEASE_S)
            await store.close()
            self.ledger = None  # nothing to shut down
            if reaper.let_go():
                reaper.collect()
            raise

    def _give_up(self, why: str) -> None:
        self.lost = why
        log.error("engine stopping: %s", why)
        if self._stop is not None:
            self._stop.set()

    async def serve(self, stop: asyncio.Event) -> None:
        """Run until ``stop`` is set (or the lease is lost), then shut down cleanly."""
        self._stop = stop
        if self.ledger is None and not await self._started(stop):
            return
        if self.lost:
            stop.set()
        self._background = [asyncio.ensure_future(self._sampler())]
        try:
            await self._loop(stop)
        finally:
            await self.shutdown()

    async def _started(self, stop: asyncio.Event) -> bool:
        """``start``, unless ``stop`` comes first: a daemon waiting for its database (or for a
        lock held elsewhere) is still stopped by SIGTERM or Ctrl+C, with nothing to shut down."""
        starting = asyncio.ensure_future(self.start())
        stopped = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait([starting, stopped], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
        if starting.done():
            starting.result()  # its refusal (another engine holds the lease) is the caller's
            return True
        starting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await starting
        log.info("engine %s stopped before it started", os.getpid())
        return False

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
        if self.moves is not None:  # a folder half made would fail its move: the round ends first
            await asyncio.gather(self.moves, return_exceptions=True)
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        try:
            if self.triggers:
                await self.triggers.close()
            if self.follower:
                await self.follower.close()
            if self.notifier is not None:
                await self.notifier.poll()  # what the shutdown itself caused
                await self.notifier.close()
            if self.tracer is not None:
                with contextlib.suppress(ProcessionError):
                    await self._trace()  # the runs the shutdown ended
                await asyncio.to_thread(self.tracer.close)
            if self.heartbeat is not None:
                self.heartbeat.stop()
            with contextlib.suppress(ProcessionError):
                await self.ledger.release(self.token)
        finally:
            await self.ledger.close()  # gives back the lease and checkpoints the WAL
            self.ledger = None
            if reaper.let_go():
                await asyncio.to_thread(reaper.collect)
        log.info("engine %s stopped", os.getpid())

    def _tracer(self, ledger: Ledger) -> tracing_.Tracer | None:
        """The OpenTelemetry export of the runs this engine ends, when configured (or given an
        exporter); a setting it cannot use, or the SDK missing, is said and nothing exported."""
        settings = self.tracing if self.tracing is not None else tracing_.load()
        for problem in settings.problems:
            log.warning("%s", problem)
        if not settings.endpoint and self.exporter is None:
            return None
        try:
            tracer = tracing_.Tracer(ledger, settings, hosts.this(), self.token, exporter=self.exporter)
        except ImportError:
            log.warning("tracing: [otel] is set but OpenTelemetry is not installed (in the project's folder:"
                        " pip install '.[otel]'); nothing is exported")
            return None
        log.info("tracing: the spans of each run go to %s", settings.endpoint or "the exporter given")
        return tracer

    async def _trace(self) -> None:
        """The spans of the runs ended since the last look (``Tracer.poll`` says what it cannot
        make, run by run); the store out of reach is the loop's to say."""
        assert self.tracer is not None
        await self.tracer.poll()

    async def _loop(self, stop: asyncio.Event) -> None:
        assert self.ledger is not None
        seen = None
        failing: type[ProcessionError] | None = None
        stopped = asyncio.ensure_future(stop.wait())
        loop = asyncio.get_running_loop()
        looked = -SETTLE_S
        try:
            while not stop.is_set():
                try:
                    version = await self.ledger.store.data_version()
                    due = any(when is not None and when <= time.time() for when in (self.backoff_until,
                                                                                    self.budget_look))
                    if version != seen or self.kick.is_set() or due:
                        self.kick.clear()
                        seen, looked = version, loop.time()
                        await self._reconcile()
                        if self.triggers:
                            await self.triggers.refresh()
                        if self.follower:
                            await self.follower.refresh()
                        await self._schedule()
                        self._look_at_moves()
                        if self.notifier is not None:
                            await self.notifier.poll()
                        if self.tracer is not None:
                            await self._trace()
                    if self.triggers and await self.triggers.fire_due(self.only):
                        self.kick.set()
                except ProcessionError as exc:  # the workspace held too long, its database out of reach: again
                    if type(exc) is not failing:  # said once, however its wording changes, and once more when it goes on
                        log.warning("engine loop: %s", exc)
                        failing = type(exc)
                    seen = None
                else:
                    if failing is not None:
                        log.warning("engine loop: going on")
                        failing = None
                store = self.ledger.store
                wait = HEARD_S if store.hears else POLL_S
                for when in (self.triggers.next() if self.triggers else None, self.backoff_until, self.budget_look):
                    if when is not None:
                        wait = max(0.0, min(wait, when - time.time()))
                if store.hears and (settle := looked + SETTLE_S - loop.time()) > 0:
                    kicked = asyncio.ensure_future(self.kick.wait())  # commits heard meanwhile: one look
                    await asyncio.wait([kicked, stopped], timeout=min(settle, wait), return_when=asyncio.FIRST_COMPLETED)
                    kicked.cancel()
                    if self.kick.is_set() or stop.is_set() or await self._heard_since(seen):
                        continue
                waits: list[asyncio.Future[Any]] = [asyncio.ensure_future(self.kick.wait())]
                if store.hears:  # another host's commit wakes the loop: no look every POLL_S
                    waits.append(asyncio.ensure_future(store.hear(wait)))
                await asyncio.wait([*waits, stopped], timeout=wait, return_when=asyncio.FIRST_COMPLETED)
                for task in waits:
                    task.cancel()
                await asyncio.gather(*waits, return_exceptions=True)
        finally:
            stopped.cancel()

    async def _heard_since(self, seen: int | None) -> bool:
        """Whether a commit was heard since the loop's last look (``seen``)."""
        assert self.ledger is not None
        try:
            return await self.ledger.store.data_version() != seen
        except ProcessionError:
            return True  # the loop's next look says what

    def _look_at_moves(self) -> None:
        """Start a round of this host's part of moves (packing, placing, clearing: file work of
        any size, on threads) beside the loop, or ask for another after the one under way."""
        if self.moves is not None and not self.moves.done():
            self.moves_again = True
            return
        assert self.ledger is not None
        self.moves_again = False
        self.moves = asyncio.ensure_future(moving.step(self.ledger))
        self.moves.add_done_callback(self._moves_done)

    def _moves_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and (exc := task.exception()) is not None and not isinstance(exc, ProcessionError):
            log.error("moves: %s: %s", type(exc).__name__, exc)
        if self.moves_again:
            self.kick.set()

    # ------------------------------------------------------------------ recovery

    async def _recover(self) -> None:
        """Kill every process a dead engine's runs left, then record those runs as lost."""
        assert self.ledger is not None
        for orphan in await self.ledger.orphans(self.token):
            _kill_orphan(orphan)
        result = await self.ledger.recover(self.token)
        if result.lost_runs or result.sessions:
            log.info("recovered: runs %s lost, sessions %s back to sleep", result.lost_runs, result.sessions)

    # ------------------------------------------------------------------ scheduling

    def busy(self) -> int:
        """Slots in use: running steps; a suspended one gives its slot up, as does one waiting
        for a person (a process blocked on input uses no CPU)."""
        return sum(1 for live in self.live.values() if not live.step.frozen and not live.waiting)

    async def _schedule(self) -> None:
        assert self.ledger is not None
        if self.stopping:
            return
        if self.backoff_until is not None and self.backoff_until <= time.time():
            await self.ledger.release_held()
        if held := await self.ledger.budget_held():
            if await self.ledger.budget_releasable(held):
                await self.ledger.release_budgets()
            self.budget_look = time.time() + BUDGET_LOOK_S  # a new period resumes them: look again then
        else:
            self.budget_look = None
        self.backoff_until = await self.ledger.held()
        free = self.slots - self.busy()
        if free <= 0:
            return
        for row in await self.ledger.ready(free + len(self.live), self.only):
            if free <= 0:
                break
            if row["id"] in self.live:
                continue
            if await self._over_budget(row["id"]):
                continue
            if row["context_tokens"] > row["window"]:
                await self._fail_to_start(
                    row, f"its context ({row['context_tokens']} tokens) is over its window ({row['window']}):"
                         f" compress it (procession compress {row['id']}) or migrate it to a larger window")
                continue
            if await self._launch(row):
                free -= 1

    async def _over_budget(self, sid: int) -> bool:
        """Suspend ``sid`` (reason ``budget``) instead of starting it, if a run would go over a
        budget of it; tell once a period what passed 80%."""
        assert self.ledger is not None
        verdict = await self.ledger.budget(sid)
        if verdict.warn:
            await self.ledger.warn_budget(sid, verdict.warn)
        if verdict.over is None:
            return False
        await self.ledger.hold_over_budget(sid, verdict.over)
        log.info("session %d suspended: %s", sid, verdict.over)
        return True

    async def _launch(self, row: Any) -> bool:
        """Start a run of the ready session ``row``: its step made ready, the run claimed (and
        recorded, with the tracker its processes will carry), then the step launched, and its
        process recorded. Nothing runs that the store does not name first."""
        assert self.ledger is not None
        sid = row["id"]
        spec = runner_spec.parse(row["runner"])
        cwd, resources, worktree = await self.ledger.workdir(sid)
        if not os.path.isdir(cwd):  # not here: held, not failed (its runs did not fail, they cannot be run here)
            with contextlib.suppress(ProcessionError):  # (it left the queue meanwhile: nothing to hold)
                absent = await self.ledger.hold_absent(sid, cwd)
                log.warning("session %d: %s", sid, "; ".join(n.text for n in absent.notes))
            return False
        tmp = tempfile.mkdtemp(prefix=f"procession-run-{sid}-")
        launch = uuid.uuid4().hex[:12]
        tracker: reaper.Tracker | None = None
        turn: agents.Turn | None = None
        invocation = agents.Invocation([])
        reader: Reader = protocol.Reader()
        talk: agents.Conversation | None = None  # what an agent CLI it drives is told
        own: OwnServers | None = None

        async def undo() -> None:
            """What was made for the step, let go of (the step itself is the caller's)."""
            if tracker is not None:
                self.launching.discard(tracker)
                tracker.close()
            if own is not None:
                await own.close()
            _remove(invocation.files, tmp)

        try:
            env = run_environment(row, spec.cli, tmp, {"PROCESSION_SESSION": str(sid),
                                                        "PROCESSION_DB": str(self.ledger.path), "PWD": cwd})
            if spec.agent:  # its CLI's state: the session's own folder (``agent_homes``)
                env = await asyncio.to_thread(agent_homes.prepared, spec.cli, env, self.ledger.path, row, cwd)
            asks = agents.asks(spec)
            if spec.kind != "openai" and (asks == "mcp" or any(mcp_binding.is_procession(r["kind"], r["uri"])
                                                      for r in resources)):
                own = OwnServers(str(self.ledger.path), sid, tmp, env)
                env.update(await own.open(resources))
            held, exe = run_bounds(row, spec, cwd, resources, env, tmp, worktree, own_files.of(self.ledger.path))
            if exe is not None:
                turn = await self.ledger.agent_turn(sid, spec, cwd, env)
                turn.tmp, turn.confined = tmp, held.confined
                turn.served = served(cwd, resources)
                turn.ask = (own.asking(self._asking(), lambda: self.stopping)
                            if own is not None and asks == "mcp" else None)
                if asks == "talk" and row["permissions"] == bounds.ASK:
                    turn.decide = self._asker(sid)
                invocation, reader = agents.prepare(spec, turn, exe)
                talk = reader.talk
                env.update(invocation.env)
            marker = f"{self.token[:12]}:{launch}"  # an openai: run's tools' processes carry it
            tracker = (reaper.MarkerTracker(marker) if spec.kind == "openai"
                       else reaper.tracker(self.token[:12], marker, self.tracker_mode, launch))
        except (OSError, InvalidArgument) as exc:
            await undo()
            await self._fail_to_start(row, _unstartable(exc, cwd))
            return False
        try:
            start = await self.ledger.start_run(sid, runner=row["runner"], engine=self.token, tracker=tracker.name,
                                                prompt_upto=turn.upto if turn else None, confinement=held.said)
        except BaseException as exc:  # not claimed (or cancelled): nothing was launched
            await undo()
            if isinstance(exc, EngineBusy):
                self._give_up(str(exc))
            if isinstance(exc, ProcessionError):
                return False
            raise
        step: ProcessStep | HttpStep
        try:
            if spec.kind == "openai":
                step = await HttpStep.start(spec, cwd, tracker.environ(env), count=self.ledger.store.count_tokens,
                                            wrap=held.wrap)
                if row["permissions"] == bounds.ASK:  # its tools run in the engine: it asks the engine
                    step.ask = self._asker(sid)
            else:
                self.launching.add(tracker)  # its processes are owned from the start
                step = await ProcessStep.start(spec, cwd, env, tracker, command=held.wrap(invocation.argv or argv(spec)),
                                               talk=talk)
        except (OSError, InvalidArgument) as exc:
            await undo()
            await self._fail_to_start(row, _unstartable(exc, cwd), run=start.run)
            return False
        except BaseException:  # cancelled as it launched: the run, claimed, is the next engine's to recover
            await undo()
            raise
        if step.pid is not None:
            try:
                await self.ledger.launch_run(sid, start.run, pid=step.pid, proc_start=proc_start(step.pid))
            except ProcessionError as exc:  # the run and its tracker are recorded: the pid is for ps, not for safety
                log.warning("session %d: run %d's pid %d not recorded: %s", sid, start.run, step.pid, exc)
        live = LiveRun(self.ledger, sid, start.run, step, tracker, row["timeout"] or DEFAULT_TIMEOUT_S,
                       reader=reader, files=invocation.files, tmp=tmp, own=own, confined=held.confined,
                       price=None if reader.reports_cost else self.prices.find(row["runner"]))
        self.live[sid] = live
        self.launching.discard(tracker)
        document = turn.prompt.encode("utf-8", "surrogatepass") if turn else start.document
        live.task = asyncio.ensure_future(self._supervise(live, document))
        log.info("run %d of session %d started (%s, pid %s, %s)", start.run, sid, row["runner"], step.pid, held.said)
        return True

    def _asking(self) -> Ledger:
        """The workspace a run's agent asks a person through: journaled as the agent's, and
        this engine told at once of each request (``Calls.told``: it hears no commit of its own
        connection), so that its notification goes out now."""
        assert self.ledger is not None
        agent = self.ledger.as_actor("agent")
        agent.told = self.kick.set
        return agent

    def _asker(self, sid: int) -> Callable[[str, dict[str, Any]], Awaitable[tuple[bool, str]]]:
        """How an ``openai:`` run of ``sid`` asks a person whether a tool call may run."""
        agent = self._asking()

        async def ask(tool: str, input: dict[str, Any]) -> tuple[bool, str]:
            return await agent.decide(sid, tool, input, keep=lambda: self.stopping)

        return ask

    async def _fail_to_start(self, row: Any, error: str, run: int | None = None) -> None:
        """Record a run that could not even start (``run``: claimed already), so the user sees why."""
        assert self.ledger is not None
        try:
            if run is None:
                run = (await self.ledger.start_run(row["id"], runner=row["runner"], engine=self.token)).run
            await self.ledger.finish_run(row["id"], run, FAILED, exit_code=None, events=protocol.Events(),
                                         error=error)
        except ProcessionError:
            pass
        log.warning("session %d: %s", row["id"], error)

    async def _supervise(self, live: LiveRun, document: bytes) -> None:
        """Feed the step, follow it, record the outcome. Never raises: a bad step fails its run."""
        live.arm(lambda: self._interrupt(live, "timeout"))
        ended = asyncio.Event()
        flusher = asyncio.ensure_future(live.flusher(ended))
        result = StepResult(None, "")
        try:
            result = await live.step.run(document, live.sink)
        except Exception as exc:  # noqa: BLE001 - keep the engine up whatever a step does
            log.exception("run %d of session %d broke", live.run, live.sid)
            result.stderr = f"{type(exc).__name__}: {exc}"
            live.step.kill()
        finally:
            live.disarm()
            ended.set()  # the flush under way finishes: what it took from the reader is stored
            await asyncio.gather(flusher, return_exceptions=True)
        try:
            await live.flush()
            outcome, error = live.outcome(result)
            last = await live.last_events()
            if isinstance(live.reader, agents.Reader):  # an agent CLI's: where its transcript is read to now
                last.followed = await follow.settled(self.ledger, live.sid, last.agent_ref)
        except Exception as exc:  # noqa: BLE001 - whatever breaks here, the run is recorded
            log.exception("run %d of session %d: its end could not be read", live.run, live.sid)
            outcome, error = live.outcome(result)
            last = protocol.Events(problems=[f"the engine could not read the end of the run: {type(exc).__name__}: {exc}"])
        if result.partial and live.intent != "suspend":  # a suspended request runs again: nothing partial stays
            last.reply = result.partial
        try:
            await live.record(outcome, result.exit_code, last, error)
        finally:
            if live.tracker is not None:
                live.tracker.close()
            if live.own is not None:
                await live.own.close()
            _remove(live.files, live.tmp)
            self.live.pop(live.sid, None)
            self.kick.set()
        log.info("run %d of session %d ended: %s", live.run, live.sid, outcome)

    def _interrupt(self, live: LiveRun, why: str) -> None:
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
            found = await rows.states(tx, list(self.live))
        states = {sid: State(state) for sid, state in found.items()}
        for sid, live in list(self.live.items()):
            state = states.get(sid, State.TERMINATED)
            if state in (State.RUNNING, State.WAITING):
                if live.step.frozen:  # resumed: on at once, even if that uses more slots than there are
                    live.step.thaw()
                    live.thawed(lambda live=live: self._interrupt(live, "timeout"))
                if state is State.WAITING:  # its clock stops while a person is asked: no timeout meanwhile
                    live.frozen()
                elif live.waiting:
                    live.thawed(lambda live=live: self._interrupt(live, "timeout"))
                live.waiting = state is State.WAITING
            elif state is State.SUSPENDED:
                if live.step.freezable:
                    if not live.step.frozen:
                        live.step.freeze()
                        live.frozen()
                else:
                    self._interrupt(live, "suspend")
            elif state is State.TERMINATED:
                self._interrupt(live, "cancel")
            else:
                self._interrupt(live, "interrupt")

    async def _sampler(self) -> None:
        """CPU% and RSS of every process of every live step, into the store; orphans reaped;
        the workspace file checked to be still the one at its path. The trackers' members are
        read in one go on a thread (not a thread's hand-off per step), each process's figures
        from one read of its ``/proc`` stat, and only figures that changed are written (each
        write has every monitor redraw the rows): a hundred idle steps cost the engine little."""
        assert self.ledger is not None
        while True:
            await asyncio.sleep(SAMPLE_S)
            moved = self.ledger.store.same_file()
            if moved:  # what it wrote now would reach no one else: stop, and say why
                self._give_up(moved)
                return
            trackers = {live.tracker for live in self.live.values() if live.tracker is not None} | self.launching
            members = await asyncio.to_thread(lambda: {t: t.members() for t in trackers}) if trackers else {}
            reaper.reap(frozenset(t.marker for t in trackers if isinstance(t, reaper.MarkerTracker)),
                        frozenset().union(*(m for t, m in members.items() if isinstance(t, reaper.CgroupTracker))))
            changed = []
            for live in list(self.live.values()):
                if live.tracker in members:
                    cpu, rss = live.usage(members[live.tracker])
                    if rss and (cpu, rss) != live.stored:
                        changed.append((live, cpu, rss))
            if changed:
                with contextlib.suppress(ProcessionError):
                    await self.ledger.sample([(cpu, rss, live.run) for live, cpu, rss in changed])
                    for live, cpu, rss in changed:
                        live.stored = (cpu, rss)

    # ------------------------------------------------------------------ watch triggers

    async def _watch_fired(self, tid: int, paths: list[str], more: int) -> None:
        assert self.ledger is not None and self.triggers is not None and self.triggers.watcher is not None
        from ..calls import watched

        trigger = self.triggers.watcher.watched.get(tid)
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
            self.triggers.watcher.dispatch(paths)
            return
        log.info("trigger %d (watch) fired: %s changed: %s", tid, plural(len(paths) + more, "path"), result)
        self.kick.set()


def _unstartable(exc: OSError | InvalidArgument, cwd: str) -> str:
    """Why a step could not start, as its run's error says it."""
    return str(exc) if isinstance(exc, InvalidArgument) else f"cannot start the step in {cwd}: {exc.strerror or exc}"


def _kill_orphan(orphan: Orphan) -> None:
    """Kill every process a dead engine's run left: by its tracker (all of them, wherever they
    went), and its leader's group if the pid is still that step (not a reused pid)."""
    found = reaper.found_again(orphan.tracker)
    if found is not None:
        found.kill()
        found.close()
    if orphan.pid is not None and orphan.proc_start is not None:
        started = proc_start(orphan.pid)
        if started is not None and abs(started - orphan.proc_start) <= 1.0:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(orphan.pid, signal.SIGKILL)
    log.info("killed what run %d left behind (a dead engine's)", orphan.run)


def run_environment(row: Any, kind: str, tmp: str, marks: dict[str, str]) -> dict[str, str]:
    """A step's environment: the session's own (``environ.session_environment``: the little of
    the engine's its runner takes, its settings, the names it passes), its temporary folder,
    and the engine's marks, which nothing overrides."""
    env = environ.session_environment(kind, json.loads(row["env"]) if row["env"] else {},
                                      json.loads(row["pass_env"]) if row["pass_env"] else [], os.environ)
    return {**env, "TMPDIR": tmp, "TMP": tmp, "TEMP": tmp, **marks}


def run_bounds(row: Any, spec: runner_spec.RunnerSpec, cwd: str, resources: list[dict[str, Any]],
               env: dict[str, str], tmp: str, worktree: tuple[str, str] | None = None, own: list[str] | None = None,
               ) -> tuple[confinement.Bounds, str | None]:
    """How a run of the session ``row`` is held (``confinement.for_run``; ``worktree``: its
    own git worktree's repository and top; ``own``: the workspace's own files, never in its
    world), and the executable of its agent CLI (None: it has none). ``InvalidArgument`` when
    it may not start."""
    exe: str | None = None
    state: list[str] = []
    configs: list[str] = []
    urls: list[str] = []
    if spec.agent:
        exe = agents.locate(spec, env)
        state, configs = agents.state(spec, env)
        urls = agents.endpoints(spec, env)
    asks = spec.kind in ("openai", "builtin") or bool(agents.asks(spec))
    held = confinement.for_run(confine=row["confine"], net=row["net"], workdir=cwd, resources=resources, env=env,
                               tmp=tmp, program=exe, state=state, reads=configs, endpoints=urls,
                               commands=[spec.target] if spec.kind == "command" else [], writes=spec.kind != "builtin",
                               worktree=worktree, own=own or (),
                               read_only="" if row["permissions"] != bounds.ASK or asks else
                               f"its {spec.kind} runner cannot ask a person and its permissions are ask")
    return held, exe


def served(cwd: str, resources: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """What an agent may have Procession itself read and write for it (an ACP agent's file
    requests): the session's bound folders and files, by their mode, and its folder unless a
    folder is bound (as its confined run would be held: ``confinement.for_run``)."""
    writes: list[str] = []
    reads: list[str] = []
    paths = [r for r in resources if r["kind"] in ("folder", "file")]
    for r in paths:
        (writes if r.get("mode", "rw") == "rw" else reads).append(str(r["uri"]))
    if not any(r["kind"] == "folder" for r in paths):
        writes.append(cwd)
    return writes, reads


def _remove(files: list[Path], folder: str | None = None) -> None:
    """A run's own files, and its temporary folder with all it holds."""
    for path in files:
        with contextlib.suppress(OSError):
            path.unlink()
    if folder:
        shutil.rmtree(folder, ignore_errors=True)


async def _patiently(step: Callable[[], Awaitable[T]]) -> T:
    """A start-up step, retried while another process holds the workspace's lock or its server
    cannot be reached: an engine is a daemon, and one started while a long transaction runs
    elsewhere, or while the server restarts, must not give up."""
    delay = 0.5
    while True:
        try:
            return await step()
        except StoreBusy as exc:
            log.warning("waiting for the workspace: %s", exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

