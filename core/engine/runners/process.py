"""A step that is a child process in its own process group.

Suspend, resume, interrupt and cancel are real signals to the whole group (SIGSTOP,
SIGCONT, SIGINT then SIGTERM then SIGKILL, SIGKILL). When the leader exits, whatever it
left behind in its group is killed too, so no step outlives its run.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from dataclasses import dataclass

from ...model.runner_spec import RunnerSpec
from .protocol import STDERR_TAIL, Output

READ_CHUNK = 64 * 1024
#: How long the rest of the group may keep stdout open after the leader exits.
LINGER_S = 0.5


@dataclass(slots=True)
class StepResult:
    exit_code: int | None
    output: Output
    stderr: str


def argv(spec: RunnerSpec) -> list[str]:
    if spec.kind == "builtin":
        return [sys.executable, "-m", "procession.engine.runners.builtin", spec.target, spec.arg]
    return ["/bin/sh", "-c", spec.target]


class ProcessStep:
    """A running step; created by ``start``, finished when ``wait`` returns."""

    freezable = True

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.pid = proc.pid
        self.frozen = False
        self.output = Output()
        self.stderr = Output(head=0, tail=STDERR_TAIL)

    @classmethod
    async def start(cls, spec: RunnerSpec, cwd: str, env: dict[str, str] | None = None) -> ProcessStep:
        proc = await asyncio.create_subprocess_exec(
            *argv(spec), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, cwd=cwd, start_new_session=True, env=env,
        )
        return cls(proc)

    async def feed(self, document: bytes) -> None:
        """Hand the step its input; a step that does not read it is not an error."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(document)
            await self.proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            self.proc.stdin.close()

    async def wait(self) -> StepResult:
        assert self.proc.stdout is not None and self.proc.stderr is not None
        readers = [asyncio.ensure_future(_drain(self.proc.stdout, self.output)),
                   asyncio.ensure_future(_drain(self.proc.stderr, self.stderr))]
        code = await self.proc.wait()
        try:
            await asyncio.wait_for(asyncio.gather(*readers), LINGER_S)
        except asyncio.TimeoutError:
            pass
        self.signal(signal.SIGKILL)
        await asyncio.gather(*readers, return_exceptions=True)
        return StepResult(code, self.output, self.stderr.text())

    def signal(self, sig: int) -> bool:
        """Signal the whole group; False when it is already gone."""
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def freeze(self) -> None:
        if self.signal(signal.SIGSTOP):
            self.frozen = True

    def thaw(self) -> None:
        if self.signal(signal.SIGCONT):
            self.frozen = False

    async def interrupt(self, grace: float) -> None:
        """SIGINT, then SIGTERM after ``grace`` seconds, then SIGKILL after as long again."""
        self.thaw()
        for sig in (signal.SIGINT, signal.SIGTERM):
            if not self.signal(sig):
                return
            try:
                await asyncio.wait_for(asyncio.shield(self.proc.wait()), grace)
                return
            except asyncio.TimeoutError:
                continue
        self.kill()

    def kill(self) -> None:
        self.signal(signal.SIGKILL)


async def _drain(stream: asyncio.StreamReader, into: Output) -> None:
    while chunk := await stream.read(READ_CHUNK):
        into.feed(chunk)
