"""Files a user names on a command line or in a setting, read with a bound: the one way in
for every face.

A path a person types may name anything: ``/dev/zero`` (read whole, it filled memory until
the kernel killed the process), a FIFO (an open for reading waits for a writer that never
comes), a folder, or a file larger than anything Procession keeps. So a named file is opened
without waiting (``O_NONBLOCK``), refused unless it is a regular file, refused if its size
is over the limit its use states, and never read past that limit (a file growing as it is
read included). Standard input (``-``) is read up to the same limit. Each refusal is one
``InvalidArgument`` line naming the file; nothing has been read into the workspace then.
"""

from __future__ import annotations

import os
import stat
from typing import BinaryIO, Final

from .beneath import what
from .errors import InvalidArgument
from .limits import TEXT_MAX, size_words

#: A text the user names (a system prompt, a memory file, a message, a summary): the
#: largest text the store keeps.
TEXT_FILE_MAX: Final = TEXT_MAX
#: A snapshot that is not as ``save`` wrote it (rewritten by another tool) is parsed whole,
#: in memory; one as written is read a part at a time, whatever its size.
SNAPSHOT_WHOLE_MAX: Final = 1 << 30
#: A settings file (the config, a theme): far larger than any real one.
SETTINGS_MAX: Final = 1 << 20


def open_regular(path: str, limit: int | None = None) -> BinaryIO:
    """``path`` opened for reading if it is a regular file (of at most ``limit`` bytes when
    one is given); anything else refused before a byte of it is read, and a FIFO without
    waiting for its writer. ``OSError`` (no such file, no permission) is the caller's to word."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InvalidArgument(f"{path} is {what(info.st_mode)}, not a regular file; refused")
        if limit is not None and info.st_size > limit:
            raise _too_large(path, limit)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def read(fh: BinaryIO, name: str, limit: int) -> bytes:
    """What ``fh`` holds, up to ``limit`` bytes; more is refused without being read (a pipe
    from ``/dev/zero`` on standard input, a file grown since it was opened)."""
    data = fh.read(limit + 1)
    if len(data) > limit:
        raise _too_large(name, limit)
    return data


def read_file(path: str, limit: int) -> bytes:
    """The whole of the regular file ``path``, if it holds at most ``limit`` bytes."""
    with open_regular(path, limit) as fh:
        return read(fh, path, limit)


def _too_large(name: str, limit: int) -> InvalidArgument:
    return InvalidArgument(f"{name} is larger than {size_words(limit)}, the most read of it; refused")
