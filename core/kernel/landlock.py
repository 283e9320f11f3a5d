"""Linux Landlock, over its three system calls: a process confines itself, then runs a program.

Why our own module and not a package: the PyPI ones (``landlock``, ``landlockpy``,
``py-landlock``, ``sandlock``) are young, and this one must also run *as a script* in the
moment between ``fork`` and the step's ``exec``, with nothing of ``procession`` imported (the
engine has threads; no Python code may run in its forked child, so the child execs this file
first, ``python -I -S landlock.py POLICY -- ARGV``, which confines itself and execs ``ARGV``).
It uses the standard library only (and as little of it as it can: it runs before every step,
so its imports are its cost), and is small: a ruleset, its rules, ``restrict_self``.

A policy names paths and what may be done beneath each: ``read`` (read files, list folders,
execute), ``write`` (that, and create, change, remove, rename, truncate), each for a folder or
a single file; ``connect``: the TCP ports a process may connect to (None: any); ``scoped``:
no signals to, and no abstract unix sockets of, processes outside the domain. On the command
line: ``-r PATH``, ``-w PATH``, ``-a PATH`` (all but executing), ``-c PORT``, ``-n`` (no TCP port but those given), ``-s``
(scoped), ``-q net|scope`` (required of the kernel), ``-W`` (in a world of its own first:
``world``; ``-N``: with a network of its own), ``-P`` (plain TCP and UDP sockets only:
``sockets``), then ``--`` and the program.
Everything the running kernel's ABI can restrict and the policy does not grant is denied, for
the process and everything it starts, whatever it does later (no way out of a domain). A path
that does not exist is skipped (it cannot be reached either). Devices cannot be made.

What Landlock cannot do, and so this cannot: name a host (TCP rules are ports), restrict UDP
(DNS) or connecting to a unix socket by path, or hide a path's existence.
"""

from __future__ import annotations

if __name__ == "__main__":  # the launcher, started with Ctrl-C ignored (``confinement.Bounds.wrap``): from here
    import _signal  # type: ignore[import-not-found]  # one ends it as it would the program, with no traceback

    _signal.signal(2, _signal.SIG_DFL)  # a run would keep as its error (``_signal``: ``signal``'s ``enum`` costs)

import ctypes
import os
import sys

MYPY = False  # mypy takes it for true; importing ``typing`` or ``collections.abc`` costs every step
if MYPY:
    from collections.abc import Iterable

#: The system calls (the same number on every architecture: they came after the unification).
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH, _RULE_NET_PORT = 1, 2
_PR_SET_PDEATHSIG, _PR_SET_NO_NEW_PRIVS = 1, 38
#: ``keyctl`` has no libc wrapper (it is libkeyutils'): its system call, per architecture.
_KEYCTL = {"x86_64": 250, "aarch64": 219, "riscv64": 219, "ppc64le": 283, "s390x": 280}

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE = 1 << 13, 1 << 14  # ABI 2, ABI 3
CONNECT_TCP = 1 << 1  # ABI 4 (BIND_TCP, 1 << 0, is not restricted: a step may serve on a port)
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6

#: What each ABI can restrict on files (ioctl on devices, ABI 5, is left alone: a terminal's).
_FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1}
#: What may be done to a single file (not a folder): the rest concerns a folder's entries.
_FILE_ACCESS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE
READ = EXECUTE | READ_FILE | READ_DIR
WRITE = READ | WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_DIR | MAKE_REG | MAKE_SOCK | MAKE_FIFO | MAKE_SYM \
    | REFER | TRUNCATE


class _Ruleset(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPort(ctypes.Structure):
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


class Unavailable(OSError):
    """The kernel cannot confine this process as asked."""


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def abi() -> int:
    """The Landlock ABI this kernel offers (0: none: not Linux, too old, or switched off)."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        found = _libc().syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    except (OSError, AttributeError):
        return 0
    return max(int(found), 0)


def restrict(read: Iterable[str] = (), write: Iterable[str] = (), connect: Iterable[int] | None = None,
             scoped: bool = False, require: Iterable[str] = (), anything: Iterable[str] = ()) -> int:
    """Confine this process (and all it will start) as said; returns the ABI used. ``anything``:
    paths beneath which all but executing may be done (so that only what ``read`` names runs).
    ``Unavailable`` if the kernel has no Landlock, or lacks what ``require`` names (``net``:
    TCP rules, ``scope``: signal and socket scoping)."""
    version = abi()
    if version < 1:
        raise Unavailable("this kernel has no Landlock")
    required = set(require)
    if "net" in required and version < 4:
        raise Unavailable(f"Landlock ABI {version} cannot restrict TCP (ABI 4 can)")
    if "scope" in required and version < 6:
        raise Unavailable(f"Landlock ABI {version} cannot scope signals and sockets (ABI 6 can)")
    libc = _libc()
    handled = _FS_BY_ABI.get(version, _FS_BY_ABI[3])
    net = CONNECT_TCP if version >= 4 and connect is not None else 0
    scope = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if version >= 6 and scoped else 0
    attr = _Ruleset(handled, net, scope)
    size = ctypes.sizeof(_Ruleset) if version >= 6 else (16 if version >= 4 else 8)
    ruleset = libc.syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        raise Unavailable(f"landlock_create_ruleset: {os.strerror(ctypes.get_errno())}")
    try:
        for access, paths in ((WRITE, write), (READ, read), (WRITE & ~EXECUTE, anything)):
            for path in paths:
                _add_path(libc, ruleset, path, access & handled)
        for port in connect or () if net else ():
            rule = _NetPort(CONNECT_TCP, int(port))
            if libc.syscall(_ADD_RULE, ruleset, _RULE_NET_PORT, ctypes.byref(rule), ctypes.c_uint32(0)) < 0:
                raise Unavailable(f"landlock_add_rule (port {port}): {os.strerror(ctypes.get_errno())}")
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise Unavailable(f"no_new_privs: {os.strerror(ctypes.get_errno())}")
        if libc.syscall(_RESTRICT_SELF, ruleset, ctypes.c_uint32(0)) < 0:
            raise Unavailable(f"landlock_restrict_self: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(ruleset)
    return version


def _add_path(libc: ctypes.CDLL, ruleset: int, path: str, access: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # not there: nothing to allow
    try:
        if os.fstat(fd).st_mode & 0o170000 != 0o040000:  # not a folder: what may be done to a file
            access &= _FILE_ACCESS
        rule = _PathBeneath(access, fd)
        if libc.syscall(_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), ctypes.c_uint32(0)) < 0:
            raise Unavailable(f"landlock_add_rule ({path}): {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(fd)


def _die_with_parent() -> None:
    """End (and so the run with it) when the process that started this one ends: the engine,
    or a foreground ``activate --now``. A run the engine is no longer there to follow, answer or
    record must not go on alone (a killed engine left an agent CLI running to the end of its
    turn); the next engine recovers the session. If that parent is already gone, end now."""
    parent = os.getppid()
    _libc().prctl(_PR_SET_PDEATHSIG, 9, 0, 0, 0)  # SIGKILL: its world's init follows it (``world``)
    if os.getppid() != parent:
        raise SystemExit(126)


def _own_keyring() -> None:
    """A session keyring of the run's own, new and empty: the one it inherited is the engine's
    and the person's (a login's keys, tokens), and a key a run added there would be read by
    the engine and every later run. Landlock does not cover keys."""
    number = _KEYCTL.get(os.uname().machine)
    if number is None or _libc().syscall(number, 1, None) < 0:  # KEYCTL_JOIN_SESSION_KEYRING, anonymous
        raise Unavailable("a keyring of its own cannot be made here")


def command_line(read: Iterable[str], write: Iterable[str], connect: Iterable[int] | None, scoped: bool,
                 require: Iterable[str]) -> list[str]:
    """The arguments ``main`` reads for a policy (before ``--`` and the program)."""
    words: list[str] = []
    for flag, values in (("-r", read), ("-w", write), ("-c", [str(p) for p in connect or ()]), ("-q", require)):
        for value in values:
            words += [flag, value]
    return words + (["-n"] if connect is not None else []) + (["-s"] if scoped else [])


def main(argv: list[str]) -> None:
    """``landlock.py POLICY... -- PROGRAM ARGS...``: confine, then become the program. Any
    failure ends here, exit status 126, saying why on stderr: never run a program unconfined
    that was to run confined."""
    given: dict[str, list[str]] = {"-r": [], "-w": [], "-c": [], "-q": [], "-a": [], "-h": []}
    flags: set[str] = set()
    at = 0
    try:
        while argv[at] != "--":
            if argv[at] in given:
                given[argv[at]].append(argv[at + 1])
                at += 2
            elif argv[at] in ("-n", "-s", "-W", "-N", "-P"):
                flags.add(argv[at])
                at += 1
            else:
                raise ValueError(argv[at])
        program = argv[at + 1:]
        if not program:
            raise IndexError
    except (IndexError, ValueError):
        sys.stderr.write("procession: cannot confine the step: usage: landlock.py [-r PATH] [-w PATH] [-a PATH] [-c PORT]"
                         " [-n] [-s] [-q net|scope] [-W [-N] [-h PATH]] [-P] -- PROGRAM [ARGS...]\n")
        raise SystemExit(126) from None
    _die_with_parent()
    os.get_exec_path()  # execvp's first use imports ``warnings``: while the interpreter's own files are readable
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # its sibling modules, imported if asked for
    if "-W" in flags:  # a world of its own first (``world``), then confined in it
        if MYPY:
            from . import world
        else:
            import world

        try:
            world.enter([*given["-r"], *given["-w"]], net="-N" in flags, covered=given["-h"])
        except OSError as exc:
            sys.stderr.write(f"procession: cannot make the run's world: {exc}\n")
            raise SystemExit(126) from None
    try:
        _own_keyring()
        restrict(given["-r"], given["-w"], [int(p) for p in given["-c"]] if "-n" in flags else None, "-s" in flags,
                 given["-q"], given["-a"])
        if "-P" in flags:  # plain TCP and UDP sockets only (``sockets``): what Landlock's TCP rules hold
            if MYPY:
                from . import sockets
            else:
                import sockets

            sockets.restrict()
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"procession: cannot confine the step: {exc}\n")
        raise SystemExit(126) from None
    try:
        os.execvp(program[0], program)
    except OSError as exc:
        sys.stderr.write(f"procession: cannot run {program[0]}: {exc.strerror}\n")
        raise SystemExit(127) from None


if __name__ == "__main__":
    main(sys.argv[1:])
