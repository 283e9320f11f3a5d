"""Paths resolved beneath a folder by the kernel: no link leads out, nothing but a regular
file or a folder is opened.

"Is it inside?" checked on a path and then used by name is a race and a trap (a link to a
path that does not exist yet passes for a new file, and writing it writes where it points).
So a folder is opened once, as a descriptor, and every path under it is resolved by the
kernel from that descriptor, component by component: ``openat2`` with ``RESOLVE_BENEATH``
(Linux 5.6) refuses any ``..`` or symbolic link that would leave the folder, absolute links
included, and ``RESOLVE_NO_MAGICLINKS`` the ``/proc`` kind. Where the kernel has no
``openat2``, a walk of the components with ``O_NOFOLLOW`` does the same in user space.

A file is opened as a path first (``O_PATH``: no side effect, whatever it is), checked to be
a regular file, then reopened through that descriptor: a FIFO, a device or a socket is
refused before anything could block on it. A new file is made with ``O_EXCL``, which never
follows a link. Used by the ``openai:`` runner's file tools, ``merge`` bringing a fork's
files back, and ``save`` carrying an agent's session folder. Where Procession makes the
folders itself (a move's unpacking, a merge's), ``descend`` follows no link at all.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
from collections.abc import Callable, Iterator
from typing import BinaryIO
from dataclasses import dataclass

from .errors import InvalidArgument

_OPENAT2 = 437  # the same on every architecture
_RESOLVE_NO_MAGICLINKS, _RESOLVE_BENEATH = 0x02, 0x08
_LINKS_MAX = 40


class Outside(InvalidArgument):
    """A path leads out of the folder it must stay in (``..``, or a link going out)."""


class NotRegular(InvalidArgument):
    """A path names something other than a regular file where one was needed."""


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_openat2_missing = False


def _openat2(dir_fd: int, path: str, flags: int, mode: int) -> int:
    global _openat2_missing
    if not _openat2_missing:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        how = _OpenHow(flags | os.O_CLOEXEC, mode if flags & os.O_CREAT else 0, _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS)
        fd = libc.syscall(_OPENAT2, dir_fd, os.fsencode(path), ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)))
        if fd >= 0:
            return int(fd)
        err = ctypes.get_errno()
        if err != errno.ENOSYS:
            raise OSError(err, os.strerror(err), path)
        _openat2_missing = True
    return _walk(dir_fd, path, flags, mode)


def _walk(dir_fd: int, path: str, flags: int, mode: int) -> int:
    """``openat2`` beneath ``dir_fd``, in user space: each component opened ``O_NOFOLLOW``, a
    link read and spliced in (an absolute one, or ``..`` above the start, is ``EXDEV``)."""
    todo = [p for p in path.split("/") if p not in ("", ".")][::-1]
    stack = [os.dup(dir_fd)]
    links = 0
    try:
        while todo:
            name = todo.pop()
            if name == "..":
                if len(stack) == 1:
                    raise OSError(errno.EXDEV, "leads out", path)
                os.close(stack.pop())
                continue
            last = not todo
            link = False
            try:
                fd = os.open(name, (flags if last else os.O_PATH | os.O_DIRECTORY) | os.O_NOFOLLOW | os.O_CLOEXEC,
                             mode, dir_fd=stack[-1])
                if stat.S_ISLNK(os.fstat(fd).st_mode):  # O_PATH | O_NOFOLLOW opens a link itself
                    os.close(fd)
                    link = True
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EEXIST):
                    raise
                try:
                    os.readlink(name, dir_fd=stack[-1])
                except OSError:
                    raise exc from None
                link = True
            if link:
                target = os.readlink(name, dir_fd=stack[-1])
                links += 1
                if links > _LINKS_MAX:
                    raise OSError(errno.ELOOP, "too many links", path)
                if target.startswith("/"):
                    raise OSError(errno.EXDEV, "an absolute link", path)
                todo += [p for p in target.split("/") if p not in ("", ".")][::-1]
                continue
            if last:
                return fd
            stack.append(fd)
        return os.open(".", flags | os.O_CLOEXEC, dir_fd=stack[-1])
    finally:
        for fd in stack:
            os.close(fd)


def relative(root: str, path: str, label: str = "the folder") -> str:
    """``path`` (relative, or absolute under ``root``) as a path relative to ``root``; a path
    that goes elsewhere by its own words (absolute, or up by ``..``) is ``Outside``."""
    if not os.path.isabs(path):
        if os.path.normpath(path or ".").split("/")[0] == "..":
            raise Outside(f"{path}: outside {label} {root}; refused")
        return path or "."
    base = os.path.normpath(root)
    plain = os.path.normpath(path)
    if plain == base:
        return "."
    if not plain.startswith(base.rstrip("/") + "/"):
        raise Outside(f"{path}: outside {label} {root}; refused")
    return plain[len(base.rstrip("/")) + 1:]


@dataclass(slots=True)
class Folder:
    """A folder opened once (``path`` resolved then, held as a descriptor): every path under it
    is resolved by the kernel from there. Close it when done (or use it as a context)."""

    path: str
    label: str = "the folder"  # how refusals name it
    fd: int = -1

    def __post_init__(self) -> None:
        self.fd = os.open(self.path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)

    def __enter__(self) -> Folder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def open(self, path: str, flags: int = os.O_PATH, mode: int = 0o666) -> int:
        """A descriptor of ``path`` under the folder; ``Outside`` if resolving it leaves it."""
        rel = relative(self.path, path, self.label)
        try:
            return _openat2(self.fd, rel, flags, mode)
        except OSError as exc:
            if exc.errno == errno.EXDEV:
                raise Outside(f"{path}: a symbolic link leads out of {self.label} {self.path}; refused") from None
            raise

    def kind(self, path: str) -> int | None:
        """The ``st_mode`` of what ``path`` names (a link under the folder followed), None if nothing."""
        try:
            fd = self.open(path)
        except FileNotFoundError:
            return None
        try:
            return os.fstat(fd).st_mode
        finally:
            os.close(fd)

    def regular(self, path: str, flags: int = os.O_RDONLY) -> int:
        """``path`` opened with ``flags`` if it is a regular file (``NotRegular`` if it is
        anything else): checked through an ``O_PATH`` descriptor first, so that nothing is
        opened that could block or act (a FIFO, a device)."""
        fd = self.open(path)
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                raise NotRegular(f"{path}: {what(mode)}, not a regular file; refused")
            return os.open(f"/proc/self/fd/{fd}", flags | os.O_CLOEXEC)
        finally:
            os.close(fd)

    def read(self, path: str, limit: int) -> bytes:
        """A regular file's first ``limit`` bytes."""
        fd = self.regular(path)
        with os.fdopen(fd, "rb") as fh:
            return fh.read(limit)

    def write(self, path: str, data: bytes, *, parents: bool = False) -> None:
        """Write a whole regular file under the folder: an existing one replaced in place, a
        new one made (``O_EXCL``: never through a link); ``parents`` makes its folders."""
        head, _, name = relative(self.path, path, self.label).rpartition("/")
        if not name or name in (".", ".."):
            raise NotRegular(f"{path}: not a file name; refused")
        if head and parents:
            self.makedirs(head)
        parent = self.open(head or ".", os.O_PATH | os.O_DIRECTORY)
        try:
            inner = Folder.__new__(Folder)
            inner.path, inner.label, inner.fd = os.path.join(self.path, head) if head else self.path, self.label, parent
            try:
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666, dir_fd=parent)
            except FileExistsError:
                fd = inner.regular(name, os.O_WRONLY | os.O_TRUNC)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
        finally:
            os.close(parent)

    def makedirs(self, path: str) -> None:
        """Make ``path``'s folders under the folder, each one beneath the last (a link among
        them that leads out is ``Outside``; a file in the way, ``NotRegular``)."""
        done = ""
        for part in relative(self.path, path, self.label).split("/"):
            if part in ("", "."):
                continue
            done = f"{done}/{part}" if done else part
            mode = self.kind(done)
            if mode is None:
                parent = self.open(os.path.dirname(done) or ".", os.O_PATH | os.O_DIRECTORY)
                try:
                    os.mkdir(part, dir_fd=parent)
                except FileExistsError:
                    pass
                finally:
                    os.close(parent)
            elif not stat.S_ISDIR(mode):
                raise NotRegular(f"{done}: {what(mode)} where a folder must be; refused")

    def files(self, path: str = ".") -> Iterator[tuple[str, int]]:
        """Every regular file under ``path`` (relative to the folder) and its size, links not
        followed (a link is not walked into, nor read), in a stable order."""
        start = self.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            base = relative(self.path, path, self.label)
            for top, dirs, names, dir_fd in os.fwalk(".", dir_fd=start, follow_symlinks=False):
                dirs.sort()
                for name in sorted(names):
                    try:
                        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                    except OSError:
                        continue
                    if stat.S_ISREG(info.st_mode):
                        rel = os.path.normpath(os.path.join(base, top, name))
                        yield rel, info.st_size
        finally:
            os.close(start)


def open_file(path: str) -> BinaryIO:
    """A regular file, opened for reading by a path whose last component is not followed if
    it is a link (``NotRegular``: a link, a FIFO, a device): for files a CLI writes and a model
    could have replaced with a link to a secret (a transcript, a file of a session's folder)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotRegular(f"{path}: a symbolic link, not a regular file; refused") from None
        raise
    fh = os.fdopen(fd, "rb")
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        fh.close()
        raise NotRegular(f"{path}: {what(mode)}, not a regular file; refused")
    return fh


def descend(root: int, path: str, made: Callable[[str], None] | None = None) -> int:
    """A descriptor (``O_RDONLY``) of the folder ``path`` beneath the folder ``root`` (a
    descriptor), each component a folder opened without following a link (a link, even one
    leading inside, fails it: for folders Procession makes or restores, where a link could
    only be someone else's). With ``made``, a missing component is made and passed to it,
    so that the caller can take it back. The caller closes the descriptor."""
    fd, done = os.dup(root), ""
    try:
        for part in path.split("/"):
            if part in ("", "."):
                continue
            done = f"{done}/{part}" if done else part
            try:
                inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except FileNotFoundError:
                if made is None:
                    raise
                os.mkdir(part, dir_fd=fd)
                made(done)
                inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def what(mode: int) -> str:
    """What a ``st_mode`` names, as a refusal says it (``a FIFO``)."""
    if stat.S_ISREG(mode):
        return "a file"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"
