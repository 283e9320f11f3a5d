"""A large snapshot read in a process of its own, while the caller writes what it reads.

A million-message load spends its time in two places one interpreter runs one after the
other: parsing and checking the file (`snapshot.read`), and SQLite storing the rows. A
thread cannot parse beside the inserts (SQLite's thread needs the interpreter back between
rows, so each insert would wait for the parser to let go of it); a process can. The child
runs `snapshot.read` on the same open file and sends what it yields as ``marshal`` frames
on a pipe, the messages a batch at a time; the caller gets the same parts in the same order
and the same refusals, on two cores. A file under `ASIDE_BYTES` is read in the caller's own
process: starting one costs more than parsing it.
"""

from __future__ import annotations

import itertools
import marshal
import os
import subprocess
import sys
from collections.abc import Generator, Iterator
from typing import IO, Any, BinaryIO, Final, Protocol

from . import snapshot
from .errors import SnapshotError

#: The size from which a file is read in a process of its own (about 100,000 messages).
ASIDE_BYTES: Final = 32 << 20
#: Messages in one frame: a frame is one ``marshal`` call each side.
BATCH: Final = 10_000


class Parts(Protocol):
    """What `read` returns: the parts, and ``close`` to stop early."""

    def __iter__(self) -> Iterator[snapshot.Part]: ...

    def __next__(self) -> snapshot.Part: ...

    def close(self) -> None: ...


def read(fh: BinaryIO, source: str) -> Parts:
    """`snapshot.read` of ``fh`` (a file open for reading at its start), in a child process
    (started now) if the file is large; ``close`` ends the child (read to the end or not)."""
    fd = fh.fileno()
    if os.fstat(fd).st_size < ASIDE_BYTES or not sys.executable:
        return snapshot.read(fh, source)
    proc = subprocess.Popen(  # -P: the folder it starts in is not where it imports from
        [sys.executable, "-P", "-c", "from procession.model.snapshot_process import serve; serve()", str(fd), source],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(fd,))
    return _Aside(_Frames(proc, source))


class _Aside:
    """The parts the child sends. Not a bare generator: closing one that never started runs
    none of its ``finally``, and the child would be left waiting on a full pipe."""

    def __init__(self, frames: _Frames) -> None:
        self.frames, self.parts = frames, _parts(frames)

    def __iter__(self) -> Iterator[snapshot.Part]:
        return self

    def __next__(self) -> snapshot.Part:
        return next(self.parts)

    def close(self) -> None:
        self.parts.close()
        self.frames.close()


def _parts(frames: _Frames) -> Generator[snapshot.Part, None, None]:
    try:
        while (frame := frames.next()) != ("done",):
            if frame == ("messages",):
                yield "messages", frames.messages()
            else:
                _, key, value = frame
                yield key, value
    finally:
        frames.close()  # at once when read to the end or refused, not when the caller closes


class _Frames:
    """What the child sends, a frame at a time; its refusals raised as ``read`` raises them."""

    def __init__(self, proc: subprocess.Popen[bytes], source: str) -> None:
        assert proc.stdout is not None and proc.stderr is not None
        self.proc, self.out, self.err, self.source = proc, proc.stdout, proc.stderr, source

    def next(self) -> tuple[Any, ...]:
        head = self.out.read(4)
        data = self.out.read(int.from_bytes(head, "little")) if len(head) == 4 else b""
        if not data:
            code = self.proc.wait()
            last = (self.err.read().decode("utf-8", "replace").strip().splitlines() or [""])[-1]
            raise SnapshotError(f"cannot read {self.source}: its reader process ended (code {code})"
                                + (f": {last}" if last else ""))
        frame: tuple[Any, ...] = marshal.loads(data)
        if frame[0] == "refused":
            raise SnapshotError(frame[1])
        if frame[0] == "not as written":
            raise snapshot.NotAsWritten
        return frame

    def messages(self) -> Iterator[tuple[Any, ...]]:
        while (frame := self.next()) != ("end",):
            yield from frame[1]

    def close(self) -> None:
        """End the child (done, or not needed any more: the caller stopped reading); again is
        nothing."""
        self.proc.kill()
        self.proc.wait()
        self.out.close()
        self.err.close()


def serve() -> None:
    """The child: ``snapshot.read`` of the file open on descriptor ``argv[1]`` (named
    ``argv[2]`` in what it says), sent as frames on standard output."""
    fd, source = int(sys.argv[1]), sys.argv[2]
    out = sys.stdout.buffer
    try:
        with os.fdopen(fd, "rb") as fh:
            for key, value in snapshot.read(fh, source):
                if key != "messages":
                    _send(out, ("part", key, value))
                    continue
                _send(out, ("messages",))
                while batch := list(itertools.islice(value, BATCH)):
                    _send(out, ("rows", batch))
                _send(out, ("end",))
        _send(out, ("done",))
    except snapshot.NotAsWritten:
        _send(out, ("not as written",))
    except SnapshotError as exc:
        _send(out, ("refused", str(exc)))
    out.flush()


def _send(out: IO[bytes], frame: tuple[Any, ...]) -> None:
    data = marshal.dumps(frame)
    out.write(len(data).to_bytes(4, "little"))
    out.write(data)
