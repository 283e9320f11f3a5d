"""A folder as a move carries it between hosts (``move``): packed on the old host, unpacked on
the new one, and removed from the old one only if nothing in it changed since.

The folder is read as an attacker may have left it (a model wrote in it): a link is carried
as a link and never followed, only regular files' bytes are read (each opened without
following a link, under a folder opened once), and a FIFO, a socket or a device is left out
and named. The pack is read as an attacker may have made it (it comes from another host,
through the store): it is unpacked member by member, by this module, not by tarfile's
extraction (whose filters Python 3.11 before 3.11.4 lacks, and whose ``tar`` filter links a
hard link to any absolute path). It takes regular files, folders and symbolic links only,
and refuses the whole pack, naming the member, for anything else (a hard link, a device, a
FIFO), a name that is absolute, holds ``..``, comes twice, or goes through a link or a
file, and for more files, entries or bytes than a move carries (whatever its gzip unpacks
to, no more is read). Each entry is made beneath the folder made before it, by descriptor
(``O_NOFOLLOW``, ``O_EXCL``): no link is followed, none written through, a link is made as a
link. No owner is taken from the pack, nor a set-id, sticky or group or other write bit. It
is all made in a new private folder beside the target, then renamed into place: nothing
that was there is written to, and a target folder that holds anything is refused.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import shutil
import stat
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from ..model import beneath
from ..model.errors import ProcessionError
from ..model.text import plural

#: The most a move carries of a folder's files through the store (a larger folder is copied
#: by the user, then moved with ``--no-files``).
CARRIED_MAX: Final = 256 * 2**20
#: The most entries (files, folders, links) a move carries of a folder: each is held in
#: memory as it is unpacked, and a pack of empty entries compresses to next to nothing.
ENTRIES_MAX: Final = 100_000
#: What a pack may take, unpacked, beyond its files' bytes: each entry's headers and padding.
_PER_ENTRY: Final = 4096


class MoveFailed(ProcessionError):
    """A step of a move that cannot be done; the move ends failed with this line, the session
    staying where it was."""


@dataclass(slots=True)
class Packed:
    """A folder as a move carries it: a gzipped tar, what it held (``manifest``: each entry's
    path, kind, and a regular file's size and change time, to tell later whether it changed),
    and what was left out."""

    data: bytes = b""
    manifest: list[list[Any]] = field(default_factory=list)
    files: int = 0
    size: int = 0
    left: list[str] = field(default_factory=list)
    bundle: bytes | None = None  # a fork's worktree: its branch (``branches.bundle``), and its tip
    tip: str | None = None

    def journal(self) -> dict[str, Any]:
        return {"files": self.files, "bytes": self.size, "left": self.left[:20], "branch": self.tip}


def pack(folder: str, limit: int = CARRIED_MAX, skip: frozenset[str] = frozenset()) -> Packed:
    """``folder`` packed, as the module's docstring says, but for the names in it ``skip`` (a
    worktree's ``.git``); ``MoveFailed`` if it is not a folder here, holds more than ``limit``
    bytes of files, or changes as it is read."""
    out = Packed()
    buf = io.BytesIO()
    try:
        with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:
            for rel, st, opened in _walk(folder, read=True, skip=skip):
                if len(out.manifest) == ENTRIES_MAX:
                    raise MoveFailed(f"its folder {folder} holds more than {ENTRIES_MAX:,} files, folders and links,"
                                     " more than a move carries: copy the folder to the other host yourself, then"
                                     " move the session with --no-files")
                info = tarfile.TarInfo(rel)
                info.mode, info.mtime = stat.S_IMODE(st.st_mode), st.st_mtime
                if stat.S_ISDIR(st.st_mode):
                    info.type = tarfile.DIRTYPE
                    tar.addfile(info)
                    out.manifest.append([rel, "d"])
                elif stat.S_ISLNK(st.st_mode):
                    assert isinstance(opened, str)
                    info.type, info.linkname = tarfile.SYMTYPE, opened
                    tar.addfile(info)
                    out.manifest.append([rel, "l", opened])
                elif opened is not None:
                    assert not isinstance(opened, str)
                    out.size += st.st_size
                    if out.size > limit:
                        raise MoveFailed(f"its folder {folder} holds more than {limit // 2**20} MiB of files, more than a move"
                                         " carries through the store: copy the folder to the other host yourself,"
                                         " then move the session with --no-files")
                    info.size = st.st_size
                    tar.addfile(info, opened)
                    out.files += 1
                    out.manifest.append([rel, "f", st.st_size, st.st_mtime_ns])
                else:
                    out.left.append(rel)
                    out.manifest.append([rel, "o"])
    except OSError as exc:  # a file gone or shortened as it was read, or one that cannot be read
        raise MoveFailed(f"its folder {folder} could not be packed ({exc}); moving it again tries again") from None
    out.data = buf.getvalue()
    return out


def survey(folder: str, skip: frozenset[str] = frozenset()) -> list[list[Any]]:
    """What ``folder`` holds now, as ``pack``'s manifest says it (nothing read but names and
    times; ``o``: what a move does not carry, a FIFO, a socket): equal to the manifest when
    nothing in it changed."""
    found: list[list[Any]] = []
    for rel, st, target in _walk(folder, read=False, skip=skip):
        if stat.S_ISDIR(st.st_mode):
            found.append([rel, "d"])
        elif stat.S_ISLNK(st.st_mode):
            found.append([rel, "l", target])
        elif stat.S_ISREG(st.st_mode):
            found.append([rel, "f", st.st_size, st.st_mtime_ns])
        else:
            found.append([rel, "o"])
    return found


def _walk(folder: str, *, read: bool, skip: frozenset[str]) -> Iterator[tuple[str, os.stat_result, Any]]:
    """Each entry under ``folder`` (itself first, as ``.``; none named in ``skip`` at its top),
    in a stable order, with its ``lstat`` and: a link's target; a regular file open for
    reading (``read``); else None. The folder is opened once, not through a link; nothing
    under it is followed."""
    try:
        root = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise MoveFailed(f"its folder {folder} cannot be opened here ({exc.strerror})") from None
    try:
        yield ".", os.fstat(root), None
        for top, dirs, names, dir_fd in os.fwalk(".", dir_fd=root, follow_symlinks=False):
            if top == ".":
                dirs[:] = [d for d in dirs if d not in skip]
                names = [n for n in names if n not in skip]
            dirs.sort()
            for name in sorted(dirs + names):
                rel = os.path.normpath(os.path.join(top, name))
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    yield rel, st, os.readlink(name, dir_fd=dir_fd)
                elif stat.S_ISREG(st.st_mode) and read:
                    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
                    with os.fdopen(fd, "rb") as fh:
                        now = os.fstat(fd)
                        yield rel, now, fh if stat.S_ISREG(now.st_mode) else None
                else:
                    yield rel, st, None
    finally:
        os.close(root)


def unpack(data: bytes, folder: str) -> None:
    """The packed folder made at ``folder``, which must not be there or be an empty folder
    (``MoveFailed`` if it holds anything: nothing there is written to or removed)."""
    tmp = unpacked(data, folder)
    try:
        ready(folder)
        with contextlib.suppress(FileNotFoundError):
            os.rmdir(folder)  # the empty folder that was there (one that filled meanwhile is refused)
        os.rename(tmp, folder)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise MoveFailed(f"its folder could not be unpacked at {folder} ({exc})") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def unpacked(data: bytes, folder: str, limit: int = CARRIED_MAX) -> str:
    """The packed files, unpacked as the module's docstring says into a new private folder
    beside ``folder`` (which must be free: ``ready``): its path, for the caller to put in place
    and remove. ``MoveFailed``, and nothing left, if the pack is refused or cannot be written."""
    ready(folder)
    parent = os.path.dirname(folder)
    try:
        os.makedirs(parent, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(folder)}.moving-", dir=parent)
    except OSError as exc:
        raise MoveFailed(f"{folder} cannot be made here ({exc.strerror})") from None
    try:
        root = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            capped = _Capped(gzip.GzipFile(fileobj=io.BytesIO(data)), limit + ENTRIES_MAX * _PER_ENTRY)
            with tarfile.open(fileobj=io.BufferedReader(capped), mode="r|") as tar:
                _extract(tar, root, limit)
        finally:
            os.close(root)
    except _Refused as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise MoveFailed(f"its folder could not be unpacked at {folder}: the pack holds {exc}; nothing was kept") from None
    except (OSError, tarfile.TarError) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise MoveFailed(f"its folder could not be unpacked at {folder} ({exc})") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return tmp


class _Refused(Exception):
    """A member of a pack that is not unpacked, and why (the pack is refused whole)."""


class _Capped(io.RawIOBase):
    """A stream read up to ``cap`` bytes, ``_Refused`` beyond: a pack's tar, which a small gzip
    can make endless (tarfile holds a long name's or a header's bytes in memory)."""

    def __init__(self, raw: gzip.GzipFile, cap: int) -> None:
        super().__init__()
        self.raw, self.left = raw, cap

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = self.raw.readinto(buffer)
        self.left -= n
        if self.left < 0:
            raise _Refused("more than a move carries, unpacked")
        return n


#: The permission bits a carried file or folder keeps: no set-id or sticky bit, no write bit
#: for its group or others (as tarfile's ``tar`` filter had it).
_MODE: Final = 0o755


def _extract(tar: tarfile.TarFile, root: int, limit: int) -> None:
    """The members of ``tar`` made beneath the folder ``root`` (a descriptor), as the module's
    docstring says; a folder's mode and time set last, so that a read-only one is filled first."""
    kinds: dict[str, str] = {}  # each name made: "d", "f" or "l"
    folders: list[tuple[str, tarfile.TarInfo]] = []
    size = 0
    for n, member in enumerate(tar):
        if n == ENTRIES_MAX:
            raise _Refused(f"more than {ENTRIES_MAX:,} files, folders and links, more than a move carries")
        rel = _name(member.name)
        if rel in kinds:
            raise _Refused(f"{rel!r} twice")
        head, _, name = rel.rpartition("/")
        if head and kinds.get(head) != "d":
            raise _Refused(f"{rel!r}, named through the symbolic link {head!r}" if kinds.get(head) == "l"
                           else f"{rel!r} before its folder {head!r}")
        if member.isreg():
            size += member.size
            if size > limit:
                raise _Refused(f"more than {limit // 2**20} MiB of files, more than a move carries")
        elif not (member.isdir() or member.issym()):
            raise _Refused(f"{rel!r}, {_kind(member)}, which a move never carries")
        kinds[rel] = "d" if member.isdir() else "l" if member.issym() else "f"
        if member.isdir():
            folders.append((rel, member))
            if rel == ".":
                continue
        parent = beneath.descend(root, head)
        try:
            if member.isdir():
                os.mkdir(name, 0o700, dir_fd=parent)
            elif member.issym():
                os.symlink(member.linkname, name, dir_fd=parent)
            else:
                _write(tar, member, name, parent)
        finally:
            os.close(parent)
    for rel, member in reversed(folders):
        fd = beneath.descend(root, rel)
        try:
            os.fchmod(fd, member.mode & _MODE)
            os.utime(fd, (member.mtime, member.mtime))
        finally:
            os.close(fd)


def _name(name: str) -> str:
    """A member's name as a path beneath the folder (``.`` for the folder itself); ``_Refused``
    if it is absolute or holds ``..``."""
    if name.startswith("/"):
        raise _Refused(f"{name!r}, an absolute name")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise _Refused(f"{name!r}, a name with '..'")
    return "/".join(parts) or "."


def _kind(member: tarfile.TarInfo) -> str:
    if member.islnk():
        return "a hard link"
    if member.ischr() or member.isblk():
        return "a device"
    if member.isfifo():
        return "a FIFO"
    return f"a member of type {member.type!r}"


def _write(tar: tarfile.TarFile, member: tarfile.TarInfo, name: str, parent: int) -> None:
    """A regular member's bytes as a new file ``name`` in the folder ``parent`` (a descriptor)."""
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=parent)
    with os.fdopen(fd, "wb") as out:
        source = tar.extractfile(member)
        assert source is not None  # a regular member always has its bytes
        shutil.copyfileobj(source, out, 1 << 20)
        os.fchmod(fd, member.mode & _MODE)
        out.flush()
        os.utime(fd, (member.mtime, member.mtime))


def ready(folder: str) -> None:
    """Refuse a target ``folder`` that is there and is not an empty folder (not through a link)."""
    if os.path.islink(folder) or (os.path.lexists(folder) and not os.path.isdir(folder)):
        raise MoveFailed(f"{folder} is there already and is not a folder; nothing was written (move it with --map to"
                         " another folder)")
    if os.path.isdir(folder) and os.listdir(folder):
        raise MoveFailed(f"{folder} is there already and holds files; nothing was written there"
                         " (move it with --map to another folder, or with --no-files to work in this one)")


def clear(folder: str, manifest: list[list[Any]], skip: frozenset[str] = frozenset(), *,
          placed: str | None = None) -> str | None:
    """Remove ``folder`` if it holds exactly what was carried of it (``skip``: what ``pack``
    left out on purpose, removed too); else keep it and say why (None: removed, or gone
    already). What a move does not carry (a FIFO, a socket) keeps it. ``placed``: where the
    files went on the other host; a path inside ``folder`` that was not there when packed and
    is now is that very folder, seen from here (the two hosts share a file system)."""
    if not os.path.lexists(folder):
        return None
    placed = os.path.normpath(placed) if placed else None  # a path with '..' is not taken for one inside
    inside = os.path.relpath(placed, folder) if placed and os.path.commonpath([folder, placed]) == folder else None
    if inside and inside != "." and os.path.lexists(placed or "") and not any(e[0] == inside for e in manifest):
        return (f"its old folder {folder} is kept: the session's new folder {placed} is inside it, and shows here"
                " (the two hosts share this file system); remove the rest of it yourself")
    left = [e[0] for e in manifest if e[1] == "o"]
    if left:
        return (f"its old folder {folder} is kept: it holds what a move does not carry ({', '.join(left[:3])}"
                + (f" and {len(left) - 3} more" if len(left) > 3 else "") + "); remove it yourself when done with it")
    try:
        now = survey(folder, skip)
    except (OSError, MoveFailed) as exc:
        return f"its old folder {folder} is kept: it could not be looked at ({exc})"
    if now != manifest:
        before, after = {e[0]: e for e in manifest}, {e[0]: e for e in now}
        changed = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
        return (f"its old folder {folder} is kept: {plural(len(changed), 'path')} changed there since it was packed"
                f" ({', '.join(changed[:3])}{' …' if len(changed) > 3 else ''}), which the session's folder now"
                " lacks: compare the two, then remove it yourself")
    try:
        shutil.rmtree(folder)  # descriptor-based: a link put in meanwhile is removed, not followed
    except OSError as exc:
        return f"its old folder {folder} could not be removed whole ({exc})"
    return None
