"""The bounds of a run, made a kernel policy: what its processes may read, write and reach.

A run's processes (a ``command:`` step, an agent CLI and every tool it starts, the commands
and MCP servers of the ``openai:`` loop) start through ``kernel/landlock.py``, which confines itself
to the policy made here and then execs the program: nothing the step starts can leave it.

What a confined run may do (``--confine bound``, the default, and ``strict``):

- write: its folder (the first folder bound, if bound ``rw``; else the folder it was spawned
  in), every ``rw`` binding, a temporary folder of its own (``TMPDIR``), its agent CLI's own
  state folder (where its sessions and login live), the devices every program writes
  (``/dev/null``, its terminal, ``/dev/shm``), and, in a fork's git worktree, what a commit
  there writes of its repository (``worktree_git``: never its hooks or configuration);
- read and execute: the system (``/usr``, ``/etc`` but for its secrets such as ``shadow``,
  ``/proc`` of its own processes), the folders of its ``PATH`` and the libraries beside them,
  the Python running Procession, its agent CLI's installation, every ``ro`` binding, and the
  user's git configuration;
- connect (``--net``): anywhere (``any``), nowhere (``none``), or only to the ports of its
  model and its bound MCP servers (``model``);
- and neither signal nor reach by abstract socket any process outside the run.

A folder that would hand a step the whole system or the home folder (``bounds.too_wide``) is
never a bound: such a run does not start. Where the kernel cannot confine (no Landlock),
``bound`` runs the step unconfined and says so (``Bounds.said``, kept on the run and the
session); ``strict`` does not start it.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..model import bounds, limits
from ..model.errors import InvalidArgument
from ..kernel import landlock

#: The launcher: run as a script, with nothing of procession imported (see ``landlock``).
LAUNCHER = str(Path(landlock.__file__).resolve())
#: Read and executed by every confined run (those that exist here).
SYSTEM_READ = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt", "/proc", "/sys",
               "/nix/store", "/snap", "/dev/random", "/dev/urandom")
#: Devices every program may write.
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/ptmx", "/dev/pts", "/dev/shm")
#: What of ``/etc`` is never read by a run: passwords, keys.
ETC_SECRETS = frozenset({"shadow", "shadow-", "gshadow", "gshadow-", "sudoers", "sudoers.d", "security", "ssl/private",
                         "ssh"})
#: ``/etc/ssh``: the client's configuration is read (git over ssh), the host's keys are not.
ETC_SSH = ("ssh_config", "ssh_config.d", "ssh_known_hosts")
#: The user's own configuration a run reads (git's identity, for a commit).
HOME_READ = (".gitconfig", ".config/git")
#: What ``strict`` needs of the kernel: every file access (truncation: 3), TCP (4), signals (6).
STRICT_ABI = 6


@cache
def kernel() -> int:
    """The Landlock ABI of this kernel (0: none), asked once."""
    return landlock.abi()


@cache
def namespaces() -> str:
    """Whether a run can have a world of its own here ("", else why not): asked once, by
    starting the launcher in one, as every run will be."""
    if kernel() < 1:
        return "this kernel has no Landlock"
    probe = Policy(tuple(_system() + _python()), (), (), world=True, own_net=True)
    try:
        done = subprocess.run(Bounds(bounds.BOUND, bounds.NONE, probe, "").wrap([sys.executable, "-I", "-S", "-c", ""]),
                              capture_output=True, timeout=30, cwd="/", env={})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"the launcher could not be started: {exc}"
    if done.returncode == 0:
        return ""
    said = done.stderr.decode("utf-8", "replace").strip().splitlines()
    return said[-1].removeprefix("procession: ") if said else f"the launcher ended with {done.returncode}"


@dataclass(slots=True, frozen=True)
class Policy:
    """What the launcher confines a run's processes to (``landlock.restrict``): paths read,
    paths written, the TCP ports it may connect to (None: any), signals and sockets scoped,
    and what the kernel must be able to hold (else the step does not run)."""

    read: tuple[str, ...]
    write: tuple[str, ...]
    connect: tuple[int, ...] | None = None
    scoped: bool = True
    require: tuple[str, ...] = ()
    world: bool = False  # a world of its own (``world``): namespaces, a root holding only what it reads and writes
    own_net: bool = False  # and a network of its own, empty (``--net none``)
    plain_sockets: bool = False  # only plain TCP and UDP sockets (``sockets``): what the TCP rules hold
    covered: tuple[str, ...] = ()  # the workspace's own files beneath what it reaches: not in its world


@dataclass(slots=True, frozen=True)
class Bounds:
    """How one run is held: its setting, the kernel policy (None: not confined) and what the
    run's record says of it."""

    confine: str
    net: str
    policy: Policy | None
    said: str

    @property
    def confined(self) -> bool:
        return self.policy is not None

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """``argv`` started confined (or as it is, when this run is not)."""
        if self.policy is None:
            return list(argv)
        p = self.policy
        # started with Ctrl-C ignored (by a shell that then becomes it), which the launcher sets back
        # first: Python's own start would take one for a KeyboardInterrupt, and the run would keep
        # its traceback as its error; one sent meanwhile is lost, and an interrupt goes on to SIGTERM
        return ["/bin/sh", "-c", 'trap "" INT; exec "$@"', "sh",
                sys.executable, "-I", "-S", LAUNCHER, *landlock.command_line(p.read, p.write, p.connect, p.scoped, p.require),
                *(["-W"] if p.world else []), *(["-N"] if p.own_net else []), *(["-P"] if p.plain_sockets else []),
                *(word for path in p.covered for word in ("-h", path)), "--", *argv]


def worktree_git(common: str, top: str) -> tuple[list[str], list[str]]:
    """What a run in a fork's git worktree reads and writes of its repository, outside its
    folder, to commit on its branch: the common git folder read; its objects, refs and reflogs
    written, and the worktree's own part of it (``worktrees/NAME``: its HEAD and index), found
    by the path it names, never by what the folder's ``.git`` says (the run writes that file).
    Never the hooks, the configuration or another worktree's part: a hook or a setting written
    there would run, outside any bound, the next time git runs in the repository. Where the
    repository reads a configuration per worktree (``extensions.worktreeConfig``), the worktree's
    part is not written either (a setting there would run with the next ``git status``)."""
    common, mine = _real(common), os.path.join(_real(top), ".git")
    write = [os.path.join(common, part) for part in ("objects", "refs", "logs")]
    admin = os.path.join(common, "worktrees")
    try:
        names = sorted(os.listdir(admin))
    except OSError:
        names = []
    for name in names:
        try:
            with open(os.path.join(admin, name, "gitdir"), encoding="utf-8", errors="replace") as fh:
                named = fh.read(4096).strip()
        except OSError:
            continue
        if _real(named) == mine and not _worktree_config(common):
            write.append(os.path.join(admin, name))
            break
    return [common], [p for p in write if os.path.isdir(p)]


def _worktree_config(common: str) -> bool:
    """Whether the repository may read a configuration per worktree (or cannot be read)."""
    try:
        with open(os.path.join(common, "config"), encoding="utf-8", errors="replace") as fh:
            text = fh.read(1 << 20).lower()
    except OSError:
        return True
    return "worktreeconfig" in text.replace(" ", "")


def unconfined(confine: str = bounds.OFF, net: str = bounds.ANY) -> Bounds:
    return Bounds(confine, net, None, "off: the session runs with your own reach (--confine off)")


def for_run(*, confine: str, net: str, workdir: str, resources: Iterable[Mapping[str, Any]], env: Mapping[str, str],
            tmp: str, program: str | None = None, state: Iterable[str] = (), reads: Iterable[str] = (),
            endpoints: Iterable[str] = (), commands: Iterable[str] = (), writes: bool = True,
            read_only: str = "", worktree: tuple[str, str] | None = None, own: Iterable[str] = ()) -> Bounds:
    """The bounds of a run: ``workdir`` (where it runs), the session's ``resources`` (its
    bindings), its environment (``PATH``, ``HOME``), its temporary folder, the agent CLI's
    ``program``, ``state`` folders and configuration files (``reads``), the URLs of its
    model (``endpoints``, for ``--net model``), and the command lines a person gave it (its
    ``command:`` runner's): the programs they name by path are read and run, as are those of
    its bound commands and MCP servers; ``writes`` false: the step writes no folder of its own
    (a ``builtin:`` one), so its folder is neither granted nor checked; ``read_only`` (why):
    its folder and bindings are read, never written (its runner cannot ask a person, and its
    session's permissions let it do nothing unasked but read), and a run the kernel cannot hold
    so does not start; ``worktree``: its folder is a fork's git worktree (its repository's
    common git folder and its top, as the store has them), on whose branch it may commit
    (``worktree_git``); ``own``: the workspace's own files (``own_files``), covered in its world
    where they lie beneath what it reaches (where no world can be made, its record says they
    are in its reach). ``InvalidArgument`` when the run may not start: a bound that is too
    wide, or ``strict`` on a kernel that cannot hold it."""
    if read_only and (confine == bounds.OFF or kernel() < 1):
        raise InvalidArgument(f"{read_only}, so the kernel must hold its run to reading its bounds, and "
                              + ("it runs with --confine off" if confine == bounds.OFF else "this kernel has no Landlock"))
    if confine == bounds.OFF:
        return unconfined(confine, net)
    home = _real(env.get("HOME") or os.path.expanduser("~"))
    read: list[str] = []
    write: list[str] = [tmp, *DEVICES]
    folder_bound = False
    for r in resources:
        kind, uri, rw = r["kind"], str(r["uri"]), r.get("mode", "rw") == "rw"
        if kind not in limits.PATH_KINDS:
            continue
        folder_bound = folder_bound or kind == "folder"
        path = _real(uri)
        why = bounds.too_wide(path, home, write=rw)
        if why:
            raise InvalidArgument(f"its binding {uri} cannot be a bound: {why} (bind a project folder, or run it"
                                  " with --confine off)")
        (write if rw and not read_only else read).append(path)
    if not folder_bound and writes:
        path = _real(workdir)
        why = bounds.too_wide(path, home, write=not read_only)
        if why:
            raise InvalidArgument(f"its folder {workdir} cannot be a bound: {why} (bind a project folder with"
                                  " procession bind SID folder DIR, or run it with --confine off)")
        (read if read_only else write).append(path)
    write += [_real(p) for p in state]
    if worktree is not None and writes:
        git_read, git_write = worktree_git(*worktree)
        read += git_read
        (read if read_only else write).extend(git_write)
    lines = [*commands, *(_command_line(r) for r in resources if r["kind"] in ("tool", "mcp"))]
    read += [f for line in lines for f in _named(line, home)]
    read += _system() + _programs(env.get("PATH", ""), home) + _python()
    if program:
        read.append(_installation(program))
    read += [os.path.join(home, p) for p in HOME_READ] + [_real(p) for p in reads]
    connect = None if net == bounds.ANY else tuple(_ports(endpoints, resources)) if net == bounds.MODEL else ()
    abi = kernel()
    if confine == bounds.STRICT:
        if abi < STRICT_ABI:
            raise InvalidArgument("--confine strict: " + (f"Landlock ABI {abi} cannot hold every bound (ABI"
                                                          f" {STRICT_ABI} can)" if abi else "this kernel has no Landlock"))
    if abi < 1:
        return Bounds(confine, net, None, "none: this kernel has no Landlock (the step runs with your own reach)")
    alone = namespaces()
    if alone and confine == bounds.STRICT:
        raise InvalidArgument(f"--confine strict: a run cannot have a world of its own here: {alone}")
    reached = [*read, *write]
    covered = tuple(p for p in dict.fromkeys(own)
                    if any(p.rstrip("/") == r or p.startswith(r.rstrip("/") + "/") for r in reached))
    policy = Policy(_unique(read), _unique(write), connect, require=("net", "scope") if confine == bounds.STRICT else (),
                    world=not alone, own_net=not alone and net == bounds.NONE, plain_sockets=connect is not None,
                    covered=() if alone else covered)
    said = _said(abi, net, alone, read_only)
    if covered and alone:  # (``strict`` did not get here)
        said += f"; the workspace's own files are in its reach ({covered[0].rstrip('/')}): keep it outside the folder"
    return Bounds(confine, net, policy, said)


def said_here(net: str, read_only: str = "") -> str:
    """What the record of a run confined here says (a run of ``--net net``)."""
    return _said(kernel(), net, namespaces(), read_only)


def _said(abi: int, net: str, alone: str, read_only: str) -> str:
    """What a confined run's record says of its bounds: the Landlock ABI, its world, and what
    either could not hold here."""
    notes = [f"{what} (ABI {abi})" for need, what in ((3, "truncating a file is not limited"),
                                                      (4, "its network is not limited" if net != bounds.ANY else ""),
                                                      (6, "signals to other processes are not limited"))
             if abi < need and what]
    if alone:
        notes.append(f"no world of its own ({alone}): other processes, terminals and sockets are in its view"
                     + ("; UDP is not limited" if net != bounds.ANY else ""))
    world = "" if alone else " in a world of its own" + (" with no network" if net == bounds.NONE else "")
    return f"landlock ABI {abi}{world}" + "".join(f"; {n}" for n in notes) + ("; read only" if read_only else "")


def _real(path: str) -> str:
    return os.path.realpath(os.path.expanduser(path))


def _unique(paths: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(p for p in paths if p))


@cache
def _system() -> list[str]:
    """The system's folders a run reads: ``SYSTEM_READ``, ``/etc`` less its secrets, and where
    ``/etc``'s links lead (the resolver's configuration under ``/run``)."""
    found = [p for p in SYSTEM_READ if os.path.exists(p)]
    try:
        names = sorted(os.listdir("/etc"))
    except OSError:
        names = []
    for name in names:
        if name not in ETC_SECRETS:
            found.append(f"/etc/{name}")
            target = os.path.realpath(f"/etc/{name}")
            if not target.startswith(("/etc/", "/usr/", "/proc/")) and os.path.isfile(target):  # /etc/mtab: the engine's own /proc
                found.append(target)
    found += [f"/etc/ssh/{name}" for name in ETC_SSH]
    return found


def _programs(path: str, home: str) -> list[str]:
    """The folders of ``PATH`` and the libraries beside them (``X/bin`` -> ``X/lib``; a version
    manager's ``shims`` -> its root): never a folder that would open the home folder."""
    found = []
    for entry in path.split(os.pathsep):
        if not os.path.isabs(entry):
            continue
        real = _real(entry)
        parent = os.path.dirname(real)
        more = [os.path.join(parent, lib) for lib in ("lib", "lib64", "libexec")] if os.path.basename(real) in (
            "bin", "sbin") else [parent] if os.path.basename(real) == "shims" else []
        for folder in (real, *more):
            if not bounds.too_wide(folder, home, write=False):
                found.append(folder)
    return found


@cache
def _python() -> list[str]:
    """The Python running Procession, and Procession itself: a ``builtin:`` step is a module
    of it, and a tool may be a Python script. A development install's package is a tree of
    links (``src/procession``): the tree, and each folder a link of it names."""
    import procession

    found = {_real(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    package = Path(procession.__file__).parent
    found.add(str(package.resolve()))
    links = [entry for entry in package.iterdir() if entry.is_symlink()]
    if links:  # a development install: the folder on the path that holds the tree, and what it links
        found.add(str(package.parent))
        found |= {str(link.resolve() if link.is_dir() else link.resolve().parent) for link in links}
    return sorted(found)


def _installation(program: str) -> str:
    """The folder an agent CLI is installed in: its ``node_modules`` (an npm install), else the
    folder of its executable."""
    real = Path(_real(program))
    for parent in real.parents:
        if parent.name == "node_modules":
            return str(parent)
    return str(real.parent)


def _command_line(resource: Mapping[str, Any]) -> str:
    """The command line of a bound command (``NAME=COMMAND``) or stdio MCP server (``stdio:COMMAND``)."""
    uri = str(resource["uri"])
    if resource["kind"] == "mcp":
        return uri[len("stdio:"):] if uri.startswith("stdio:") else ""
    name, _, line = uri.partition("=")
    return line or name


#: What a command line's word is when it names a script a program runs (``python3 /x/net.py``).
SCRIPTS = (".py", ".js", ".mjs", ".cjs", ".ts", ".sh", ".rb", ".pl")


def _named(line: str, home: str) -> list[str]:
    """The programs a command line names by an absolute path (its first word, and the scripts
    it runs): each one's folder (so that a script finds what lies beside it), or the file
    alone where its folder would open too much. Other paths in it are data, which only a
    binding gives."""
    try:
        words = shlex.split(line)
    except ValueError:
        return []
    found = []
    for n, word in enumerate(words):
        path = os.path.expanduser(word)
        if not (n == 0 or path.endswith(SCRIPTS)) or not os.path.isabs(path) or not os.path.isfile(path):
            continue
        real = _real(path)
        folder = os.path.dirname(real)
        found.append(folder if not bounds.too_wide(folder, home, write=False) else real)
    return found


def _ports(urls: Iterable[str], resources: Iterable[Mapping[str, Any]]) -> list[int]:
    """The TCP ports of ``urls`` and of the session's bound MCP servers and URLs."""
    ports = set()
    for url in [*urls, *(str(r["uri"]) for r in resources if r["kind"] in ("mcp", "url"))]:
        try:
            parts = urlsplit(url)
            if parts.scheme in ("http", "https"):
                ports.add(parts.port or (443 if parts.scheme == "https" else 80))
        except ValueError:
            continue
    return sorted(ports)
