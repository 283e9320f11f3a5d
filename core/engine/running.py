"""One run while it happens: its step, what it says committed as it says it, its clock.

A ``LiveRun`` feeds its step and reads what it prints as it prints it. Events (messages,
memory changes, sends, usage) are committed as they come, at most every ``FLUSH_S``
(``Ledger.emit``), and the raw output goes into the run's log (``procession logs``), bounded: the first and the last
``LOG_HEAD``/``LOG_TAIL`` bytes stay, the middle of a flood is dropped as it comes, with a
line saying how much. Nothing the store refuses to take for a while is lost: a busy
workspace only delays a flush, which is retried with what came meanwhile; the end of the run
is recorded with retries until it is stored.

Its clock counts running time, not time frozen: a suspended step's timeout waits with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeAlias

from ..model.allowed import DENIALS_KEPT, denials
from ..model.errors import ProcessionError, StoreBusy, StoreFull
from .ledger import CANCELLED, FAILED, INTERRUPTED, OK, TIMEOUT, Ledger
from ..model.prices import Price
from .own_mcp import OwnServers
from . import reaper
from .reaper import Tracker
from .runners import protocol
from .runners.agents import Reader as AgentReader
from .runners.http import HttpStep
from .runners.process import ProcessStep, StepResult

log = logging.getLogger("procession.engine")

Step = ProcessStep | HttpStep
#: What reads a step's stdout: the step protocol's reader, or an agent CLI's.
Reader: TypeAlias = protocol.Reader | AgentReader
FLUSH_S = 0.2
LOG_HEAD = 256 * 1024
LOG_TAIL = 256 * 1024
#: How long the end of a run is retried while the workspace stays busy (then the next engine
#: start records it as lost: the step itself is gone by then).
RECORD_FOR_S = 600.0


@dataclass(slots=True)
class LiveRun:
    ledger: Ledger
    sid: int
    run: int
    step: Step
    tracker: Tracker | None
    timeout: float | None
    intent: str | None = None  # why it is being stopped: interrupt, suspend, cancel, timeout, shutdown
    task: asyncio.Task[None] | None = None
    stopper: asyncio.Task[None] | None = None
    reader: Reader = field(default_factory=protocol.Reader)
    files: list[Path] = field(default_factory=list)  # the step's own files, removed when it ends
    tmp: str | None = None  # its temporary folder (its TMPDIR), removed with all it holds when it ends
    own: OwnServers | None = None  # Procession's own MCP servers it reaches (closed when it ends)
    confined: bool = False  # the kernel holds it to its bounds: what it was denied is said in its record
    waiting: bool = False  # its agent waits for a person's answer (its session is W): no slot, no clock
    price: Price | None = None  # what its tokens cost, when its runner says no cost (``model.prices``)
    denied: list[str] = field(default_factory=list)  # what its processes said the kernel refused them
    problems: list[str] = field(default_factory=list)
    done: bool = False
    _said: asyncio.Event = field(default_factory=asyncio.Event)  # something to flush: output, or what the store refused
    # the log, bounded: (stream, time, text) chunks not yet stored; bytes stored; tail row ids and sizes
    _chunks: list[tuple[str, float, str]] = field(default_factory=list)
    _logged: int = 0
    _head_end: int = 0
    _tail: deque[tuple[int, int]] = field(default_factory=deque)
    _tail_bytes: int = 0
    _dropped: int = 0
    # the clock: running time, frozen time
    _frozen_at: float | None = None
    frozen_s: float = 0.0
    _timer: asyncio.TimerHandle | None = None
    _started: float = field(default_factory=time.monotonic)
    _used: dict[int, tuple[float, float]] = field(default_factory=dict)  # pid: its CPU seconds, and when, last sampled
    stored: tuple[float, int] | None = None  # the CPU% and RSS its run's row holds

    # ------------------------------------------------------------------ output as it comes

    def sink(self, stream: str, data: bytes) -> None:
        """What the step prints: stdout is read for events; everything goes to the log."""
        if stream == "out":
            self.reader.feed(data)
        text = data.decode("utf-8", "replace")
        if stream == "err":
            self._denials(text)
        self._chunks.append((stream, time.time(), text))
        self._said.set()

    def _denials(self, text: str) -> None:
        """Keep what the step's processes say the kernel refused them (a confined run's record
        says it: ``sh: cannot create /etc/x: Permission denied``)."""
        if self.confined and len(self.denied) < DENIALS_KEPT:
            for line in denials(text):
                if line not in self.denied and len(self.denied) < DENIALS_KEPT:
                    self.denied.append(line)

    async def flush(self) -> None:
        """Commit the log and the events read since the last flush (kept for the next one when
        the workspace is busy). The log first: what a reader of the store sees a step say (a
        message in its history), its log holds already."""
        events = self._priced(self.reader.take())
        self.done = self.done or events.done  # a done event ends the session when the run ends
        for _, _, meta in events.messages:  # a tool that reports a refusal of the kernel's
            tool = (meta or {}).get("tool")
            if isinstance(tool, dict) and isinstance(tool.get("output"), str):
                self._denials(tool["output"])
        self.problems += events.problems
        events.problems = []
        self._logged_diagnostics(events)
        await self._flush_log()
        if events:
            try:
                emitted = await self.ledger.emit(self.sid, self.run, events)
                self.problems += emitted.problems
            except (StoreBusy, StoreFull):  # kept for the next flush: nothing said is lost
                self.reader.pending = _merge(events, self.reader.pending)
                self._said.set()
            except ProcessionError as exc:
                self.problems.append(f"could not apply the step's events: {exc}")
            except Exception as exc:  # noqa: BLE001 - said in the run's error, never lost in silence
                log.exception("run %d of session %d: its events could not be applied", self.run, self.sid)
                self.problems.append(f"could not apply the step's events: {type(exc).__name__}: {exc}")

    async def last_events(self) -> protocol.Events:
        """What the step's output held at its end (its diagnostics logged, as all before)."""
        last = self._priced(self.reader.close())
        self._logged_diagnostics(last)
        await self._flush_log()
        return last

    def _priced(self, events: protocol.Events) -> protocol.Events:
        """Its tokens' cost by the price table, when its runner says none (from all the tokens
        the events hold: a batch the store refused comes back merged with the next)."""
        if self.price is not None:
            events.cost = self.price.of(events.tokens_in, events.tokens_out, events.cache_read, events.cache_write)
        return events

    def _logged_diagnostics(self, events: protocol.Events) -> None:
        """An agent CLI's diagnostics go to the run's log, not to how the run ended."""
        self._chunks += [("err", time.time(), f"{line}\n") for line in events.diagnostics]
        events.diagnostics = []

    async def _flush_log(self) -> None:
        if not self._chunks:
            return
        chunks, self._chunks = self._chunks, []
        try:
            ids = await self.ledger.log(self.run, chunks)
        except (StoreBusy, StoreFull):
            self._chunks = chunks + self._chunks
            self._said.set()
            return
        except ProcessionError:
            return
        for (_, _, text), rid in zip(chunks, ids):
            if self._logged < LOG_HEAD:
                self._logged += len(text)
                self._head_end = rid
                continue
            self._tail.append((rid, len(text)))
            self._tail_bytes += len(text)
        drop_upto = 0
        while self._tail_bytes > LOG_TAIL and len(self._tail) > 1:
            rid, size = self._tail.popleft()
            self._tail_bytes -= size
            self._dropped += size
            drop_upto = rid
        if drop_upto:
            with contextlib.suppress(ProcessionError):
                await self.ledger.drop_log(self.run, drop_upto, self._head_end)

    async def flusher(self, ended: asyncio.Event) -> None:
        """Flush what the step says as soon as it says it (``sink``), then at most once every
        ``FLUSH_S`` while it goes on (a burst is one flush), until ``ended`` is set: a step that
        says nothing costs nothing meanwhile, a hundred of them no wake-up at all. What the
        store did not take (a busy workspace) is tried again ``FLUSH_S`` later, said or not.
        A reader that also hears its agent otherwise than through its output (a conversation's
        work: a person's answer, the HTTP events of ``opencode serve``) is flushed every
        ``FLUSH_S`` instead.

        Never cancelled: a flush holds events it has taken from the reader until the store
        took them, which may wait on another process's lock for seconds; cancelled then, they
        would be lost (the chaos bench found it: a step's reply gone when its run ended while
        its flush waited)."""
        timed = isinstance(self.reader, AgentReader) and self.reader.talk is not None
        while not ended.is_set():
            if not timed:
                await _either(self._said, ended)
                if ended.is_set():
                    return
            self._said.clear()
            await self.flush()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(ended.wait(), FLUSH_S)
                return

    # ------------------------------------------------------------------ the clock

    def arm(self, on_timeout: Any) -> None:
        """Start (or go on with) the timeout, for the running time left."""
        if self.timeout is None or self._timer is not None:
            return
        left = self.timeout - self.running_s()
        self._timer = asyncio.get_running_loop().call_later(max(left, 0.0), on_timeout)

    def usage(self, pids: set[int]) -> tuple[float, int]:
        """CPU% (of one core, its processes' summed) and RSS of the run's processes ``pids``
        since the last sample (a process seen for the first time counts from the next)."""
        now = time.monotonic()
        cpu, rss = 0.0, 0
        used: dict[int, tuple[float, float]] = {}
        for pid in pids:
            found = reaper.usage(pid)
            if found is None:
                continue
            used[pid] = (found[0], now)
            if (before := self._used.get(pid)) is not None and now > before[1]:
                cpu += 100 * (found[0] - before[0]) / (now - before[1])
                rss += found[1]
        self._used = used
        return cpu, rss

    def running_s(self) -> float:
        return time.monotonic() - self._started - self.stopped_s()

    def stopped_s(self) -> float:
        """How long it has not run: suspended, or waiting for a person (the span under way too)."""
        return self.frozen_s + (time.monotonic() - self._frozen_at if self._frozen_at is not None else 0.0)

    def frozen(self) -> None:
        if self._frozen_at is None:
            self._frozen_at = time.monotonic()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def thawed(self, on_timeout: Any) -> None:
        if self._frozen_at is not None:
            self.frozen_s += time.monotonic() - self._frozen_at
            self._frozen_at = None
        self.arm(on_timeout)

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # ------------------------------------------------------------------ the end

    def outcome(self, result: StepResult) -> tuple[str, str]:
        """How the run ended, and what to say of it."""
        outcome = {"cancel": CANCELLED, "timeout": TIMEOUT, None: OK if result.exit_code == 0 else FAILED}.get(
            self.intent, INTERRUPTED)
        notes = list(self.problems)
        if outcome == FAILED:
            notes.append(f"exit status {result.exit_code}" if result.exit_code is not None else "no exit status")
        if result.stderr.strip() and outcome != OK:
            notes.append(result.stderr.strip())
        if self._dropped:
            notes.append(f"{self._dropped} bytes of its log dropped from the middle (the first and last"
                         f" {LOG_HEAD // 1024} KiB kept)")
        if self.denied:
            notes.append("its bounds denied: " + "; ".join(self.denied)
                         + (" (and maybe more)" if len(self.denied) >= DENIALS_KEPT else ""))
        return outcome, "\n".join(notes)

    async def record(self, outcome: str, exit_code: int | None, events: protocol.Events, error: str) -> None:
        """Record the end of the run however long the workspace is held by others: a run left
        open would leave its session ``running`` with no step."""
        events.done = events.done or self.done
        deadline = time.monotonic() + RECORD_FOR_S
        delay = 0.2
        said = ""
        while True:
            try:
                await self.ledger.finish_run(self.sid, self.run, outcome, exit_code=exit_code, events=events,
                                             error=error, requeue=self.intent == "suspend",
                                             frozen_s=self.stopped_s(), stopping=self.intent == "shutdown")
                if said:
                    log.info("run %d of session %d recorded after all", self.run, self.sid)
                return
            except (StoreBusy, StoreFull) as exc:  # the workspace held by others, or its disk full: wait
                if time.monotonic() > deadline:
                    log.error("run %d of session %d could not be recorded (%s); the next engine start will",
                              self.run, self.sid, exc)
                    return
                if str(exc) != said:  # said once, not at every try
                    log.warning("run %d not recorded yet (%s); retrying", self.run, exc)
                    said = str(exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
            except ProcessionError as exc:
                log.error("cannot record run %d: %s", self.run, exc)
                return
            except Exception as exc:  # noqa: BLE001 - output that cannot be stored still ends the run
                log.error("cannot record the output of run %d: %s", self.run, exc)
                events, outcome = protocol.Events(), FAILED
                error = f"the engine could not record this run's output: {exc}"


async def _either(*events: asyncio.Event) -> None:
    """Until one of ``events`` is set."""
    waits = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()


def _merge(a: protocol.Events, b: protocol.Events) -> protocol.Events:
    """Two batches of events as one, in order (a flush that had to wait, and what came after)."""
    out = protocol.Events()
    out.add(a)
    out.add(b)
    return out
