"""A step that is a child process, with every process it starts followed by its ``Tracker``.

Suspend, resume, interrupt and cancel act on the whole tree the step made, whatever session
or group its processes moved to (``reaper``): SIGSTOP / SIGCONT to every process, SIGINT to
the leader's group (as a terminal's Ctrl-C) then SIGTERM, then SIGKILL to everything. The
step's input is written while its output is read, so neither side can fill a pipe and wait
for the other. The step is over when its leader has exited: what it left running (a
``setsid`` grandchild holding the pipes open, say) is killed after ``LINGER_S``; what an agent
server left (its conversation's ``linger``) may first end by itself, saving its session.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...model.runner_spec import RunnerSpec
from ..reaper import WAITED, Tracker, starting
from .agents.base import Conversation
from .protocol import STDERR_TAIL, Output

READ_CHUNK = 64 * 1024
#: How long the rest of the tree may keep the pipes open after the leader exits.
LINGER_S = 0.5
#: Where there is no pidfd to wait on: how often the leader's exit is looked for.
EXIT_POLL_S = 0.02
Sink = Callable[[str, bytes], None]  # (stream "out" | "err", bytes as they arrive)


@dataclass(slots=True)
class StepResult:
    exit_code: int | None
    stderr: str
    partial: str = ""  # what a stopped HTTP step had received of its reply


def argv(spec: RunnerSpec) -> list[str]:
    if spec.kind == "builtin":
        return [sys.executable, "-m", "procession.engine.runners.builtin", spec.target, spec.arg]
    return ["/bin/sh", "-c", spec.target]


class ProcessStep:
    """A running step; created by ``start``, finished when ``run`` returns."""

    freezable = True

    def __init__(self, proc: asyncio.subprocess.Process, tracker: Tracker,
                 talk: Conversation | None = None) -> None:
        self.proc = proc
        self.talk = talk  # what it is told as the reader says it, instead of one document
        self.ended = False  # it is a server its reader ended (``Conversation.terminate``) when its turn was over
        self.pid: int | None = proc.pid
        self.tracker = tracker
        self.frozen = False
        self.stderr = Output(head=0, tail=STDERR_TAIL)

    @classmethod
    async def start(cls, spec: RunnerSpec, cwd: str, env: dict[str, str], tracker: Tracker,
                    command: list[str] | None = None, talk: Conversation | None = None) -> ProcessStep:
        """Start ``command`` (default: the spec's) in a session of its own, as one of the
        tracker's processes; ``talk``: its stdin is a conversation (``agents.Conversation``)."""
        with starting():
            proc = await asyncio.create_subprocess_exec(
                *tracker.wrap(command or argv(spec)), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, cwd=cwd, start_new_session=True, env=tracker.environ(env),
            )
            tracker.started(proc.pid)
            WAITED.add(proc.pid)
        return cls(proc, tracker, talk)

    async def run(self, document: bytes | None, sink: Sink) -> StepResult:
        """Feed the step (``None``: its stdin is closed at once) while reading what it prints
        into ``sink``; return when its leader has exited and its output is read."""
        assert self.proc.stdout is not None and self.proc.stderr is not None

        def err(chunk: bytes) -> None:
            self.stderr.feed(chunk)
            sink("err", chunk)

        readers = [asyncio.ensure_future(_drain(self.proc.stdout, lambda c: sink("out", c))),
                   asyncio.ensure_future(_drain(self.proc.stderr, err))]
        exited: asyncio.Future[Any] = asyncio.ensure_future(self._exited())
        feeding = asyncio.ensure_future(self._feed(document, exited))
        read: asyncio.Future[Any] = asyncio.gather(*readers)
        try:
            # the output ends with the leader, unless what it left holds the pipes open:
            # asyncio's wait() would wait for them, so the leader's own exit is watched
            await asyncio.wait([read, exited], return_when=asyncio.FIRST_COMPLETED)
            if not read.done():
                await asyncio.wait([read], timeout=LINGER_S)
            if self.talk is not None and self.talk.terminate:
                if not exited.done():  # its output closed as it ends: its exit follows, a moment behind
                    await asyncio.wait([exited], timeout=self.talk.linger)
                if exited.done():
                    await self._left_to_end(self.talk.linger)
        finally:
            self.kill()  # whatever the leader left behind
            feeding.cancel()
            exited.cancel()
            await asyncio.gather(*readers, feeding, exited, return_exceptions=True)
            if read.done() and not read.cancelled():
                read.exception()  # retrieved here; a reader's failure is raised below
            read.cancel()
        code = await self.proc.wait()
        if self.ended and code == -signal.SIGTERM:  # the end it was given: a server's normal one
            code = 1 if self.talk is not None and self.talk.failed else 0
        elif self.talk is not None and self.talk.failed and code == 0:  # its reader gave up on it
            code = 1
        WAITED.discard(self.proc.pid)
        for reader in readers:  # what broke while reading (the sink's work) breaks the run, not silently
            if not reader.cancelled() and (exc := reader.exception()) is not None:
                raise exc
        return StepResult(code, self.stderr.text())

    async def _left_to_end(self, within: float) -> None:
        """What an agent server started may still be saving its session when the server has
        exited (Claude Code under claude-agent-acp: its SDK signals it and exits at once):
        given up to ``within`` seconds to end by itself before the rest is killed; killed
        sooner, the session it saves is lost and its next run cannot take it up again."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline and self.tracker.living():
            await asyncio.sleep(EXIT_POLL_S)

    async def _exited(self) -> None:
        """Until the leader has exited, whatever holds its pipes: the event loop wakes this when
        its pidfd becomes readable (Linux 5.3+), so a step that runs for hours costs nothing
        meanwhile. Where there is no pidfd (another system, an older kernel, a sandbox that
        refuses it) the return code asyncio sets is looked for every ``EXIT_POLL_S``."""
        if self.proc.returncode is not None:
            return
        try:
            pidfd = os.pidfd_open(self.proc.pid)
        except ProcessLookupError:  # exited and collected already: its return code is on its way
            return
        except (AttributeError, OSError):
            return await self._polled()
        loop = asyncio.get_running_loop()
        gone = loop.create_future()

        def readable() -> None:
            if not gone.done():
                gone.set_result(None)

        try:
            loop.add_reader(pidfd, readable)
            await gone
        finally:
            loop.remove_reader(pidfd)
            os.close(pidfd)

    async def _polled(self) -> None:
        while self.proc.returncode is None:
            await asyncio.sleep(EXIT_POLL_S)

    async def _feed(self, document: bytes | None, exited: asyncio.Future[Any]) -> None:
        """Hand the step its input (or its conversation's lines as they come, until the
        conversation ends); a step that does not read it is not an error. ``exited``: done
        when the leader has exited (a server ended after its ``linger`` if it has not)."""
        assert self.proc.stdin is not None
        try:
            if self.talk is not None:
                async for line in self.talk.lines():
                    self.proc.stdin.write(line)
                    await self.proc.stdin.drain()
                if self.talk.terminate:
                    self.proc.stdin.close()  # its end, to an agent that ends with its input (saving its session)
                    await asyncio.wait([exited], timeout=self.talk.linger)
                    if not exited.done():
                        self.ended = self.signal_leader(signal.SIGTERM)
            elif document:
                self.proc.stdin.write(document)
                await self.proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            self.proc.stdin.close()

    def signal_leader(self, sig: int) -> bool:
        """Signal the leader's process group (the tools it started in sessions of their own are
        left to it, as a terminal's Ctrl-C would); False when it is gone."""
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def freeze(self) -> None:
        self.tracker.signal(signal.SIGSTOP)
        self.frozen = True

    def thaw(self) -> None:
        self.tracker.signal(signal.SIGCONT)
        self.frozen = False

    async def interrupt(self, grace: float) -> None:
        """What it is told when its conversation has a way (ACP's ``session/cancel``), else
        SIGINT; then SIGTERM after ``grace`` seconds, then SIGKILL to everything."""
        if self.frozen:
            self.thaw()
        if self.talk is not None and self.talk.interrupt is not None and self.talk.interrupt():
            try:  # it ends its turn, then itself on its closed stdin (given its linger for that)
                await asyncio.wait_for(asyncio.shield(self.proc.wait()), grace + self.talk.linger)
            except asyncio.TimeoutError:
                pass
        for sig in (signal.SIGINT, signal.SIGTERM):
            if self.proc.returncode is not None:
                break
            if not self.signal_leader(sig):
                break
            try:
                await asyncio.wait_for(asyncio.shield(self.proc.wait()), grace)
                break
            except asyncio.TimeoutError:
                continue
        self.kill()

    async def abandon(self) -> None:
        """Kill a step that was never claimed, and wait for it."""
        self.kill()
        await self.proc.wait()
        WAITED.discard(self.proc.pid)

    def kill(self) -> None:
        """SIGKILL to the leader and everything of its tree. Not ``Process.kill``: it polls the
        child first (``waitpid``), which would take its exit status from asyncio's watcher."""
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self.proc.pid, signal.SIGKILL)
        self.tracker.kill()


async def _drain(stream: asyncio.StreamReader, into: Callable[[bytes], None]) -> None:
    while chunk := await stream.read(READ_CHUNK):
        into(chunk)
