"""Every process a step starts, found and controlled, whatever session or group it moves to.

Agent CLIs start their tools in sessions of their own (``setsid``, ``bwrap --new-session``), and
a step may double-fork: signalling the step's process group misses them, and killing the
leader orphans them. So each run gets a ``Tracker`` that knows all its processes:

- ``CgroupTracker``: the step starts inside a cgroup v2 of its own (the unified hierarchy, where
  this process may make one): the kernel keeps every descendant in it, and ``cgroup.kill``
  ends them all at once. Used when a cgroup can be made here.
- ``MarkerTracker``: the step starts with ``PROCESSION_RUN=<engine>:<run>`` in its environment,
  which its descendants inherit; its processes are those whose environment carries the
  marker (read from ``/proc``), plus the leader's descendants. Used everywhere else.

Either way, while it runs, the engine is a child subreaper (``PR_SET_CHILD_SUBREAPER``): a
process orphaned by a step is re-parented to the engine, not to init, so the engine can reap
it (``reap``) and nothing it tracks outlives it unnoticed. Suspend sends SIGSTOP to every
tracked process (so they read ``T`` in ``/proc`` and in htop), resume SIGCONT, cancel SIGKILL;
each is repeated until no new process shows up, so a process that forks while being stopped is
caught too.
A dead engine's runs are found again by the next one through the tracker name kept in the
run's row (a cgroup path, or a marker).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger("procession.engine")

PR_SET_CHILD_SUBREAPER = 36
MARKER_ENV = "PROCESSION_RUN"
#: Where this engine tries to make cgroups (cgroup v2: the unified hierarchy).
CGROUP_ROOTS = (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup"))
#: Rounds of "signal everything, look again" before a stop or a kill gives up on stragglers.
ROUNDS = 8
#: What ``/proc/PID/stat`` counts CPU time and memory in.
_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


#: Engines of this process that hold it a subreaper (one per workspace it serves).
_holders = 0


def hold() -> bool:
    """Make this process the reaper of its descendants' orphans (Linux), for one more engine;
    False where it cannot."""
    global _holders
    _holders += 1
    return _subreaper(1)


def let_go() -> bool:
    """One engine of this process stopped; the last one makes it an ordinary parent again
    (True), and then ``collect``s: a process that embeds an engine and lives on is not left a
    subreaper, gathering zombies nobody reaps. Called where ``hold`` is (the event loop), so
    that the count and the flag move together."""
    global _holders
    _holders = max(0, _holders - 1)
    if _holders:
        return False
    _subreaper(0)
    return True


def collect() -> None:
    """End the orphans this process was given (its runs are over) and collect their status;
    it stops if another engine holds the process meanwhile (they may be its own)."""
    for _ in range(ROUNDS):
        if _holders or not reap():
            return
        time.sleep(0.02)  # a killed orphan is a zombie, to collect, a moment later


def _subreaper(on: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_CHILD_SUBREAPER, on, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


#: Children this process started in sessions of their own and waits for itself, asyncio
#: collecting their exit status: step leaders, the commands of tools and of notifications.
#: ``reap`` leaves them alone: it would kill one it cannot tell from an orphan, or take its
#: exit status from asyncio (which then says 255).
WAITED: set[int] = set()
#: Processes being started right now (forked, not yet known by pid, marked or in their run's
#: cgroup): ``reap`` waits for them, or it would take one for an orphan and kill it.
_starting = 0


@contextlib.contextmanager
def starting() -> Iterator[None]:
    """Around starting a process in a session of its own (until it is a ``WAITED`` member, or
    carries its run's marker): no orphan is reaped meanwhile. Without it a step started while
    the engine looked for orphans died of SIGKILL before it ran (``exit -9``), most often just
    after an engine restart, when many runs start at once."""
    global _starting
    _starting += 1
    try:
        yield
    finally:
        _starting -= 1


def reap(live: frozenset[str] = frozenset(), owned: frozenset[int] = frozenset()) -> list[int]:
    """Collect the exit status of steps' orphans re-parented to this process, and kill the live
    ones no live run owns.

    Only processes of another session than this process's are taken: every step starts in a
    session of its own, and its descendants stay there or make their own, while whatever else
    this process starts (a subprocess, a test's helper) stays in its session and is waited for
    by whoever started it, as are the children asyncio waits for (``WAITED``). A live orphan is
    a step's process whose parent exited; one that carries the marker of a run in ``live`` (a
    marker tracker's), or is ``owned`` (a member of a live run's cgroup), belongs to that run.
    Any other — its run over, or it cleared its environment, so that a marker tracker cannot
    tell it from nothing — is killed: nothing a step started outlives it unseen. Returns the
    orphans it killed or collected (none while a process is ``starting``)."""
    if _starting:
        return []
    me, found = os.getpid(), []
    mine = os.getsid(0)
    needles = {f"{MARKER_ENV}={m}".encode() for m in live}
    for pid in _children():
        if pid in WAITED:
            continue
        stat = _stat(pid)
        if stat is None or stat[1] != me:
            continue
        try:
            if os.getsid(pid) == mine:
                continue
        except OSError:
            continue
        if stat[0] != "Z":
            if pid not in owned and not needles & set(_environ(pid)):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
                    found.append(pid)
            continue
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)
            found.append(pid)
    return found


def _environ(pid: int) -> list[bytes]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return fh.read().split(b"\0")
    except OSError:
        return []


class Tracker:
    """The processes of one run."""

    name = ""  # what the run's row keeps, to find them again

    def environ(self, env: dict[str, str]) -> dict[str, str]:
        """The environment a step starts with (the marker goes in here)."""
        return env

    def wrap(self, argv: list[str]) -> list[str]:
        """The command line that starts the step as one of the run's processes."""
        return argv

    def started(self, pid: int) -> None:
        """The step's leader is running with this pid."""

    def members(self) -> set[int]:
        raise NotImplementedError

    def living(self) -> set[int]:
        """Its processes that have not exited (a zombie waits only for its parent to collect it)."""
        return {pid for pid in self.members() if (stat := _stat(pid)) is not None and stat[0] != "Z"}

    def signal(self, sig: int) -> int:
        """Send ``sig`` to every process, again to those that appear meanwhile; how many got it."""
        done: set[int] = set()
        for _ in range(ROUNDS):
            new = self.members() - done
            if not new:
                break
            for pid in new:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
            done |= new
        return len(done)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)

    def close(self) -> None:
        """The run is over: forget what was made for it."""


class MarkerTracker(Tracker):
    """Processes carrying the run's marker in their environment, or descending from its leader."""

    def __init__(self, marker: str) -> None:
        self.marker = marker
        self.name = f"marker:{marker}"
        self.leader: int | None = None
        self._needle = f"{MARKER_ENV}={marker}".encode()

    def environ(self, env: dict[str, str]) -> dict[str, str]:
        return {**env, MARKER_ENV: self.marker}

    def started(self, pid: int) -> None:
        self.leader = pid

    def members(self) -> set[int]:
        found: set[int] = set()
        children: dict[int, list[int]] = {}
        for pid in _pids():
            stat = _stat(pid)
            if stat is None or stat[0] == "Z":
                continue
            children.setdefault(stat[1], []).append(pid)
            if self._marked(pid):
                found.add(pid)
        todo = [self.leader] if self.leader is not None and _stat(self.leader) else []
        todo += list(found)
        while todo:  # and every descendant of those (one may have cleared its environment)
            pid = todo.pop()
            found.add(pid)
            todo.extend(c for c in children.get(pid, ()) if c not in found)
        return found

    def _marked(self, pid: int) -> bool:
        return self._needle in _environ(pid)


class CgroupTracker(Tracker):
    """A cgroup v2 of the run's own: the kernel keeps every descendant in it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.name = f"cgroup:{path}"

    @classmethod
    def make(cls, engine: str, run: str) -> CgroupTracker | None:
        """A new cgroup for this run, or None where none can be made here."""
        for root in CGROUP_ROOTS:
            if not (root / "cgroup.controllers").exists():  # not a cgroup v2 hierarchy
                continue
            path = root / f"procession-{engine}" / f"run-{run}"
            try:
                path.mkdir(parents=True, exist_ok=True)
            except OSError:
                continue
            if (path / "cgroup.procs").exists():
                return cls(path)
        return None

    def wrap(self, argv: list[str]) -> list[str]:
        """A shell that moves itself into the cgroup, then becomes the step (``exec``: the same
        pid): no code runs in the forked child before ``exec`` (the engine has threads)."""
        return ["/bin/sh", "-c", 'echo 0 > "$0" && exec "$@"', str(self.path / "cgroup.procs"), *argv]

    def members(self) -> set[int]:
        try:
            return {int(p) for p in (self.path / "cgroup.procs").read_text().split()}
        except (OSError, ValueError):
            return set()

    def kill(self) -> None:
        kill = self.path / "cgroup.kill"
        if kill.exists():
            with contextlib.suppress(OSError):
                kill.write_text("1")
        self.signal(signal.SIGKILL)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.path.rmdir()
        with contextlib.suppress(OSError):
            self.path.parent.rmdir()  # the engine's folder, once its last run is gone


def tracker(engine: str, run_marker: str, mode: str = "auto", run: str = "") -> Tracker:
    """The tracker for a new run: a cgroup where one can be made (``mode`` auto or cgroup),
    else the environment marker."""
    if mode in ("auto", "cgroup"):
        made = CgroupTracker.make(engine, run)
        if made is not None:
            return made
        if mode == "cgroup":
            log.warning("no cgroup can be made here; following the run's processes by its marker")
    return MarkerTracker(run_marker)


def found_again(name: str | None) -> Tracker | None:
    """The tracker a run's row names (a dead engine's run), to find its processes again."""
    if not name:
        return None
    kind, _, rest = name.partition(":")
    if kind == "cgroup":
        return CgroupTracker(Path(rest))
    if kind == "marker":
        return MarkerTracker(rest)
    return None


def _pids() -> list[int]:
    try:
        return [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []


def _children() -> list[int]:
    """This process's children, the orphans given to it among them: each of its threads'
    ``children`` in ``/proc`` (Linux 3.5+), not every process's stat (``reap`` looks every
    second, and a machine runs hundreds). Where the kernel keeps no such list, every process."""
    if not os.path.exists(f"/proc/self/task/{os.getpid()}/children"):
        return _pids()
    found: list[int] = []
    for tid in _tasks():
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            with open(f"/proc/self/task/{tid}/children", "rb") as fh:
                found += [int(pid) for pid in fh.read().split()]
    return found


def _tasks() -> list[str]:
    try:
        return os.listdir("/proc/self/task")
    except OSError:
        return []


def _stat(pid: int) -> tuple[str, int] | None:
    """A process's state letter and parent pid, from ``/proc/PID/stat``; None when it is gone."""
    fields = _fields(pid)
    if len(fields) < 2:
        return None
    return fields[0].decode(), int(fields[1])


def usage(pid: int) -> tuple[float, int] | None:
    """A process's CPU time so far (user and system, seconds) and its resident memory (bytes),
    from one read of ``/proc/PID/stat``; None when it is gone."""
    fields = _fields(pid)
    if len(fields) < 22:
        return None
    return (int(fields[11]) + int(fields[12])) / _TICKS, int(fields[21]) * _PAGE


def _fields(pid: int) -> list[bytes]:
    """``/proc/PID/stat`` from its state on (its name, in parentheses, may hold spaces); none
    when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return []
    return data[data.rfind(b")") + 2:].split()
