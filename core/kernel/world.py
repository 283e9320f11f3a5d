"""A run's own world: the namespaces a confined run starts in, beside its Landlock policy.

Landlock decides what a run's processes may *do* to the paths they reach; it cannot decide
what they *see*. A run that shares the machine's view reads every other process's
``/proc/PID`` (the engine's environment, another run's socket paths on its command line),
opens every ``/dev/pts/N`` (the person's terminals), connects to any unix socket by its path
and, as Landlock's TCP rules do not cover MPTCP, to any port. So a confined run is started in
a world of its own, made of namespaces (what Claude Code's and Codex's sandboxes use,
through bubblewrap; made here directly, as bubblewrap's monitor does not pass on the signals
the engine's suspend and interrupt are made of):

- a user namespace (the same uid and gid inside; it owns the others and grants nothing
  outside them);
- a mount namespace whose root is a new, empty file system holding only what the run's
  policy names (each path bound at its own place, links recreated as links), a ``/proc`` of
  its own, a ``/dev`` of the few devices every program uses with a ``devpts`` of its own (no
  other terminal exists there), a ``/dev/shm`` of its own, and a ``/tmp`` holding only the
  bound paths beneath it: whatever is not in the policy does not exist, unix sockets included;
- a PID namespace: the run sees its own processes only, the engine's least of all;
- an IPC namespace (System V memory and queues of its own);
- with ``--net none``, a network namespace with nothing but its own loopback: nothing outside
  it can be reached, by TCP, MPTCP, UDP or an abstract socket.

The process tree: the launcher (the step's leader, as the engine sees it) makes the
namespaces and forks the namespace's init (its PID 1), which builds the file system, then
forks the program (PID 2), confined by Landlock by the launcher's code, then exec'd. The three
share the step's process group, so the engine's signals to the group reach the program as
before; the launcher and init ignore them (a PID 1 must not die of a Ctrl-C meant for the
program) and end with the program: init reports its exit status to the launcher, which ends
the same way (exit code, or the same signal), and when init ends the kernel kills whatever the
run left in its namespace. Init dies with the launcher (a parent-death signal), so a launcher
SIGKILLed takes the whole world with it.

Like ``landlock``, this module runs as part of the launcher script (``python -I -S``), with
the standard library's smallest parts only, in a process with no threads (``unshare`` of a
user namespace needs that).
"""

from __future__ import annotations

import ctypes
import os
import sys

MYPY = False
if MYPY:
    import signal as _signal
    from collections.abc import Iterable
else:
    import _signal  # ``signal`` itself imports ``enum``: a tenth of every step's start

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 8, 4096, 16384, 1 << 18
MNT_DETACH = 2
_PR_SET_PDEATHSIG = 1
_SIGINT, _SIGKILL, _SIGTERM, _SIGHUP, _SIGQUIT = 2, 9, 15, 1, 3
#: ``pivot_root`` has no libc wrapper: its system call, per architecture.
_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}
#: The devices of every program (bound from the machine's ``/dev``): no disk, no terminal.
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
#: Made by the world itself, never bound from the machine.
OWN = ("/proc", "/dev")
_IFF_UP, _SIOCGIFFLAGS, _SIOCSIFFLAGS = 1, 0x8913, 0x8914
_OPENAT2, _AT_FDCWD, _RESOLVE_NO_MAGICLINKS, _RESOLVE_NO_SYMLINKS = 437, -100, 0x02, 0x04


class Refused(OSError):
    """The kernel does not let this process make a world of its own (no user namespaces)."""


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    return libc


def _check(result: int, what: str) -> None:
    if result < 0:
        raise Refused(f"{what}: {os.strerror(ctypes.get_errno())}")


def _mount(libc: ctypes.CDLL, source: str | None, target: str, kind: str | None, flags: int,
           data: str | None = None) -> None:
    _check(libc.mount(source.encode() if source else None, target.encode(), kind.encode() if kind else None,
                      flags, data.encode() if data else None), f"mount {target}")


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def enter(paths: Iterable[str], *, net: bool, covered: Iterable[str] = ()) -> None:
    """Make this process's world as the module says, and return in its PID 2 (the program's
    process, in the new root, in the folder it started in), ready to be confined and exec'd;
    the launcher and init never return from here. ``paths``: what the run's policy names
    (read and written alike: Landlock decides which); ``net``: a network of its own (empty);
    ``covered``: the workspace's own files, not in the world though a folder it shows holds them.
    ``Refused`` (in the launcher, before anything was started) when the kernel will not."""
    libc = _libc()
    uid, gid, cwd = os.getuid(), os.getgid(), os.getcwd()
    flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | (CLONE_NEWNET if net else 0)
    _check(libc.unshare(flags), "unshare")
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")

    def ignore(signum: int, frame: object) -> None:
        """The program's signal, sent to its whole group: its own to act on."""

    for signum in (_SIGINT, _SIGTERM, _SIGHUP, _SIGQUIT):
        _signal.signal(signum, ignore)
    told, tell = os.pipe()
    init = os.fork()
    if init:
        os.close(tell)
        _launcher(init, told)
    os.close(told)
    libc.prctl(_PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0)  # (its parent is outside its PID view: not to be asked)
    try:
        _build(libc, sorted(set(paths)), cwd, sorted(set(covered)))
        if net:
            _loopback(libc)
    except OSError as exc:
        os.write(2, f"procession: cannot make the run's world: {exc}\n".encode())
        os._exit(126)
    program = os.fork()
    if program:
        _init(program, tell)
    os.close(tell)
    for signum in (_SIGINT, _SIGTERM, _SIGHUP, _SIGQUIT):
        _signal.signal(signum, _signal.SIG_DFL)


def _launcher(init: int, told: int) -> None:
    """Wait for the world to end; end as its program did."""
    try:
        _, status = os.waitpid(init, 0)
    except ChildProcessError:
        os._exit(1)
    said = b""
    while chunk := os.read(told, 16):
        said += chunk
    if not said:  # init ended without a word: it could not build the world, and said why
        os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 126)
    status = int(said)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        _signal.signal(sig, _signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.waitstatus_to_exitcode(status))


def _init(program: int, tell: int) -> None:
    """The world's PID 1: reap whatever is orphaned in it until the program ends, then tell
    the launcher how it ended (the rest of the world is killed as this process exits)."""
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(1)
        if pid == program:
            os.write(tell, str(status).encode())
            os._exit(0)


def _build(libc: ctypes.CDLL, paths: list[str], cwd: str, covered: list[str]) -> None:
    """The new root: a tmpfs holding each of ``paths`` (sorted) bound at its place, each of
    ``covered`` beneath them covered (``_cover``) and what ``paths`` name beneath those shown
    again, its own ``/proc``, ``/dev`` and ``/tmp``; then made the root, the machine's let go
    of, and the process put back in ``cwd``."""
    pivot = _PIVOT_ROOT.get(os.uname().machine)
    if pivot is None:
        raise Refused(f"no pivot_root known for {os.uname().machine}")
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)
    # A tmpfs on /tmp becomes the root for a moment, the machine's root beneath it at /oldroot
    # (where /tmp shows what it held again), as bubblewrap does.
    _mount(libc, "tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    os.mkdir("/tmp/oldroot")
    os.mkdir("/tmp/newroot")
    _check(libc.syscall(pivot, b"/tmp", b"/tmp/oldroot"), "pivot_root")
    os.chdir("/")
    _mount(libc, "tmpfs", "/newroot", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    bound: list[str] = []
    for path in paths:
        if not path.startswith("/") or path == "/" or any(path == own or path.startswith(own + "/") for own in OWN):
            continue
        if any(path.startswith(done + "/") for done in bound):
            continue  # shown already, with the folder that holds it
        if _bind(libc, "/oldroot" + path, "/newroot" + path):
            bound.append(path)
    hidden = [path.rstrip("/") for path in covered if any(path.startswith(done + "/") for done in bound)]
    for path in covered:
        if path.rstrip("/") in hidden:
            _cover(libc, path.rstrip("/"), folder=path.endswith("/"))
    again: list[str] = []
    for path in paths:  # what the policy names beneath a covered folder (its session's agent folder)
        if any(path.startswith(h + "/") for h in hidden) and not any(path.startswith(a + "/") for a in again):
            if _bind(libc, "/oldroot" + path, "/newroot" + path):
                again.append(path)
    _dev(libc)
    os.makedirs("/newroot" + cwd, exist_ok=True)  # a step given no folder (``builtin:``) still starts in one: empty
    os.makedirs("/newroot/tmp", exist_ok=True)
    os.chmod("/newroot/tmp", 0o1777)
    os.mkdir("/newroot/proc")
    _mount(libc, "proc", "/newroot/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _mount(libc, None, "/oldroot", None, MS_REC | MS_PRIVATE)
    _check(libc.umount2(b"/oldroot", MNT_DETACH), "umount /oldroot")
    os.chdir("/newroot")
    _check(libc.syscall(pivot, b".", b"."), "pivot_root")
    _check(libc.umount2(b".", MNT_DETACH), "umount the old root")
    os.chdir("/")
    os.chdir(cwd)


def _cover(libc: ctypes.CDLL, path: str, *, folder: bool) -> None:
    """``path``, in the world under construction, covered: a folder by an empty one of its own,
    a file by an empty device (``/dev/null``). One that is not there yet is made first (an empty
    folder or file: what its owner makes or finds there), else the run could make it, a WAL
    for SQLite to replay, a hook in a session's agent folder. Reached with no link followed (a
    run may have put one on the way, to have another covered instead): where that cannot be,
    the world is not made (``OSError``), rather than show what it must not."""
    parent = _folder(libc, os.path.dirname(path))
    if parent < 0:
        raise OSError(f"the workspace's own {path} cannot be covered: a link is on its way")
    name = os.path.basename(path)
    try:
        try:
            if folder:
                os.mkdir(name, 0o700, dir_fd=parent)
            else:
                os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=parent))
        except FileExistsError:
            pass
        fd = _open_beneath(libc, "/newroot" + path)
    finally:
        os.close(parent)
    if fd < 0:
        raise OSError(f"the workspace's own {path} cannot be covered: a link is on its way")
    try:
        where = f"/oldroot/proc/self/fd/{fd}"
        if os.fstat(fd).st_mode & 0o170000 == 0o040000:
            _mount(libc, "tmpfs", where, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755")
        else:
            _mount(libc, "/oldroot/dev/null", where, None, MS_BIND)
    finally:
        os.close(fd)


def _folder(libc: ctypes.CDLL, path: str) -> int:
    """The folder ``path`` of the world under construction, opened (``O_PATH``) with no link
    followed, each of its folders made (0700) where it is not yet, one at a time beneath the
    one before (a folder missing in the real tree is made there, as its owner would); -1 when
    a link is on its way."""
    at = "/newroot"
    fd = _open_beneath(libc, at)
    for name in path.strip("/").split("/"):
        if fd < 0 or not name:
            break
        try:
            os.mkdir(name, 0o700, dir_fd=fd)
        except FileExistsError:
            pass
        finally:
            os.close(fd)
        at += "/" + name
        fd = _open_beneath(libc, at)
    return fd


def _bind(libc: ctypes.CDLL, source: str, target: str) -> bool:
    """``source`` shown at ``target``: a link as the same link (never followed), a folder or a
    file bound; False when there is nothing at ``source``. The policy's paths were resolved
    by the engine: a link met on the way now (another run may have put one in a folder it
    writes, to have this run's world show what it leads to) means the path is not what was
    checked, and it is left out."""
    try:
        st = os.lstat(source)
    except OSError:
        return False
    os.makedirs(os.path.dirname(target), exist_ok=True)
    if os.path.lexists(target):
        return False
    if st.st_mode & 0o170000 == 0o120000:
        os.symlink(os.readlink(source), target)
        return False  # what it leads to is bound by its own name, if the policy names it
    fd = _open_beneath(libc, source)
    if fd < 0:
        return False
    try:
        if os.fstat(fd).st_mode & 0o170000 == 0o040000:
            os.mkdir(target)
        else:
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        _mount(libc, f"/oldroot/proc/self/fd/{fd}", target, None, MS_BIND | MS_REC)
    finally:
        os.close(fd)
    return True


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def _open_beneath(libc: ctypes.CDLL, path: str) -> int:
    """``path`` opened (``O_PATH``) with no link followed anywhere on the way (``openat2``'s
    ``RESOLVE_NO_SYMLINKS``, Linux 5.6, older than Landlock); -1 if that cannot be."""
    how = _OpenHow(os.O_PATH | os.O_CLOEXEC, 0, _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS)
    fd: int = libc.syscall(_OPENAT2, _AT_FDCWD, path.encode(), ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)))
    return fd


def _dev(libc: ctypes.CDLL) -> None:
    """A ``/dev`` of its own: the devices every program uses, a ``devpts`` instance of its own
    (the run's own terminals, none of anyone else's), ``/dev/shm``, and the usual links."""
    os.makedirs("/newroot/dev", exist_ok=True)
    _mount(libc, "tmpfs", "/newroot/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755")
    for name in DEVICES:
        source = "/oldroot/dev/" + name
        if os.path.exists(source):
            os.close(os.open("/newroot/dev/" + name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            _mount(libc, source, "/newroot/dev/" + name, None, MS_BIND)
    os.mkdir("/newroot/dev/pts")
    _mount(libc, "devpts", "/newroot/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620")
    os.symlink("pts/ptmx", "/newroot/dev/ptmx")
    os.mkdir("/newroot/dev/shm")
    _mount(libc, "tmpfs", "/newroot/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        os.symlink(target, "/newroot/dev/" + name)


class _IfReq(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 16), ("flags", ctypes.c_short), ("pad", ctypes.c_char * 22)]


def _loopback(libc: ctypes.CDLL) -> None:
    """The empty network's loopback up: the run may talk to itself, and to nothing else."""
    fd = libc.socket(2, 2, 0)  # AF_INET, SOCK_DGRAM
    _check(fd, "socket")
    try:
        req = _IfReq(b"lo", 0)
        _check(libc.ioctl(fd, _SIOCGIFFLAGS, ctypes.byref(req)), "loopback")
        req.flags |= _IFF_UP
        _check(libc.ioctl(fd, _SIOCSIFFLAGS, ctypes.byref(req)), "loopback up")
    finally:
        os.close(fd)


def probe() -> str:
    """Whether a world can be made here: "" if so, else why not (run in a child of its own:
    the caller's namespaces are never changed)."""
    if not sys.platform.startswith("linux"):
        return "not Linux"
    libc = _libc()
    pid = os.fork()
    if pid == 0:
        try:
            _check(libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWNET), "unshare")
        except OSError:
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    return "" if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 else "user namespaces are not allowed here"
