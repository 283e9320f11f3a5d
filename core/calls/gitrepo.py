"""Git, read and driven through the ``git`` binary itself.

Why the binary and not a library: what a commit trigger follows and what a worktree fork
makes must be exactly what the user's own ``git`` sees and does — its ref storage (loose,
packed, reftable), linked worktrees, ``merge-tree``'s three-way merge (the ``ort`` strategy
``git merge`` uses), hooks, config and identity. pygit2 binds libgit2, whose merge and
worktree support trail git's and which must match the system's library; dulwich is pure
Python and has neither ``ort`` nor ``merge-tree``; GitPython runs the binary anyway. One git
process costs a few milliseconds, which a commit (or a fork) affords.

Every function here is synchronous and blocking: the calls and the engine run them on a
worker thread. Output is read with ``-z`` wherever it holds paths, in the C locale, and no
read takes git's optional locks (``GIT_OPTIONAL_LOCKS=0``: ``status`` does not rewrite the
index under a user's feet). A failure is a ``GitError`` whose message is git's own last line.

Procession's own git reads no program from the repository. A repository a session works in
is one its step could write (its ``.git`` is in the session's folder), and what git runs for
Procession (a fork's ``worktree add``, a merge and its commit, a ``status``) runs outside the
step's bounds. So of the repository's own configuration (its ``config``, a worktree's
``config.worktree``, what they include) git reads only an allow-list of keys that run
nothing (``READ``); every other key it sets is overridden on the command line. Why an
allow-list: git names a program in ever more keys (filters, drivers, signing commands,
``core.sshCommand``, ``gpg.ssh.defaultKeyCommand``...), and a deny-list of them misses the one
git adds next. Why overriding, not another configuration: git has no switch to skip a
repository's configuration (``GIT_CONFIG_GLOBAL``/``GIT_CONFIG_SYSTEM`` replace the user's,
not the repository's), and a copy of the git folder would have to share its refs, which git
rewrites by renaming files. What a value on the command line cannot undo is refused or
pinned: a conditional include and a ``core.worktree`` elsewhere (``_refused``), and every
transport but files (``PINNED``: a list-valued key keeps the repository's values). The cost
is one ``git config --list`` before each call (a few milliseconds).

The listing and the call are two reads of a file a running step may write: a key it adds in
between (found by an attack pass, racing a fork it asked for through its own MCP server) is
read by the call, unlisted. So, where the kernel has Landlock, the call is also held to
running git alone (``_held``): it may read and write what the user may, but execute only git,
its own programs (``git --exec-path``), the loader that runs them, and the programs the
user's own configuration names (``_users_programs``: Git LFS's filter, a signing program). A
program a repository names, listed or not, cannot start. Where one of the user's programs
runs through the shell (git runs a command holding a space or a shell character with
``/bin/sh``), the shell may run too, and that one race stays open for such a user.
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from functools import cache

from ..model.errors import ProcessionError

#: Commits one firing lists (the cause says how many more there were).
COMMITS_LISTED = 200
#: Paths one firing lists.
PATHS_LISTED = 1_000
#: How long one git process may take before it is given up on.
TIMEOUT_S = 120.0


class GitError(ProcessionError):
    """Git refused, or is not there; the message is what it said, on one line."""


@dataclass(slots=True, frozen=True)
class Repo:
    """A folder's repository: its top folder (a linked worktree's own), the git folder of
    that worktree, the common git folder every worktree shares (branches live there), the
    branch checked out (None: detached) and the commit checked out (None: no commit yet)."""

    top: str
    git_dir: str
    common_dir: str
    branch: str | None
    head: str | None


@dataclass(slots=True, frozen=True)
class Commit:
    id: str
    subject: str
    paths: tuple[str, ...]


#: What Procession's own git runs with, whatever any configuration says. No hook and no file
#: system monitor: they run a program the repository names (its ``hooks`` folder, a key), and a
#: repository a session works in is one its step could write (its ``.git`` is in the session's
#: folder). No other repository reached but by a file path (a bundle, a folder): a transport
#: runs programs (ssh, a proxy, a credential helper, a remote helper) that a URL the repository
#: rewrites (``url.*.insteadOf``) or a key git reads as a list (``core.gitProxy``, whose first
#: value wins) would pick, and a value on the command line cannot take a list's back. A partial
#: clone's missing object is therefore not fetched: the call fails, saying the transport. No
#: git started in a submodule (a ``status`` of a modified one, a checkout or fetch that
#: recurses): its configuration is another repository's, not listed, and as writable by the
#: step (in ``.git/modules``); a submodule's own uncommitted changes are not seen.
PINNED = ("-c", "core.quotePath=false", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false",
          "-c", "protocol.allow=never", "-c", "protocol.file.allow=always", "-c", "diff.ignoreSubmodules=dirty",
          "-c", "submodule.recurse=false", "-c", "fetch.recurseSubmodules=false")
#: The keys of the repository's own configuration that Procession's own git reads (an allow-list:
#: a key git adds in a later version is not read until it is named here). Each runs nothing:
#: what the repository's format is (``core.repositoryformatversion``, ``extensions.*``,
#: ``core.bare``: git reads them from the file itself, whatever the command line says), what
#: the file system does (``filemode``, ``symlinks``, ``ignorecase``, ``precomposeunicode``),
#: what a file's lines end with (``autocrlf``, ``eol``) and which files are checked out
#: (``sparsecheckout*``, ``index.sparse``): without them ``status`` would see changes where the
#: user's git sees none. Reflogs kept; the remotes a clone names, the branches that track
#: them and the URLs rewritten (no transport but files reaches any of them, and an empty
#: ``insteadOf`` would rewrite every URL, a bundle's path too); the identity of a merge's
#: commit; the signing format (``gpg.format``: openpgp, x509 or ssh, a choice among programs
#: each named by a key not read, whose empty value fails every commit); Git LFS's format
#: version. ``include.path`` cannot be overridden, and what it includes is listed with the
#: rest and read the same way (a conditional include is refused: see ``_refused``).
#: ``core.worktree`` is read only once ``_refused`` found that it names the repository's own
#: folder.
READ = re.compile(r"core\.(repositoryformatversion|bare|worktree|filemode|symlinks|ignorecase|precomposeunicode"
                  r"|logallrefupdates|autocrlf|eol|sparsecheckout|sparsecheckoutcone)|index\.sparse|extensions\.[^.]+"
                  r"|remote\..+\.(url|fetch|promisor|partialclonefilter)|branch\..+\.(remote|merge)"
                  r"|url\..+\.(push)?insteadof"
                  r"|user\.(name|email)|gpg\.format|include\.path|lfs\.repositoryformatversion", re.DOTALL)
#: The scopes that are the repository's own (its ``config``, a worktree's ``config.worktree``,
#: and the files they include): those the user's own (system, global) and the command line are not.
REPOSITORY = frozenset({"local", "worktree"})


def _env() -> dict[str, str]:
    return {**os.environ, "LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0"}


def run(cwd: str | None, *args: str, git_dir: str | None = None, check: bool = True,
        input: bytes | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    """``git args`` in ``cwd`` (or on the repository ``git_dir``), with ``env`` added to the
    environment; ``GitError`` when it fails and ``check`` is set.

    Git reads of the repository's own configuration only the keys ``READ`` names: it is listed
    first (``git config --list``, which runs nothing), and every other key it sets is given, on
    the command line (``GIT_CONFIG_KEY_n``, which the git processes git starts inherit), the
    value the user's own configuration gives it, else an empty one: as git takes a key's last
    value, the repository's is not used. The user's own configuration (Git LFS's filter, the
    identity, a signing set-up) applies as it is. A key whose empty value git refuses fails the
    call, and the one line says to set it in the user's own configuration."""
    if shutil.which("git") is None:
        raise GitError("git is not installed (or not on PATH)")
    cmd = ["git", *PINNED]
    if git_dir is not None:
        cmd.append(f"--git-dir={git_dir}")
    base = {**_env(), **(env or {})}
    try:
        proc = listed = _git(cmd, cwd, base, "config", "--list", "--show-scope", "--includes", "-z")
        unread: dict[str, str] = {}
        if listed.returncode == 0:  # else git cannot read it, and says why as the call would
            settings = _settings(listed.stdout)
            unread = _unread(settings)
            confined = {**base, **_pairs(base, unread)}
            _refused(cmd, cwd, confined, settings)
            proc = _git(_held(cmd, settings), cwd, confined, *args, input=input)
    except FileNotFoundError:
        raise GitError(f"{cwd} does not exist") from None
    except NotADirectoryError:
        raise GitError(f"{cwd} is not a folder") from None
    except subprocess.TimeoutExpired:
        raise GitError(f"git {args[0]} took longer than {TIMEOUT_S:g} s") from None
    if proc.returncode != 0:
        proc = _explained(proc, unread)
        if check:
            raise GitError(said(proc) or f"git {args[0]} exited {proc.returncode}")
    return proc


def _git(cmd: list[str], cwd: str | None, env: dict[str, str], *args: str,
         input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*cmd, *args], cwd=cwd, capture_output=True, env=env, input=input, timeout=TIMEOUT_S)


#: The keys of the user's own configuration (system, global) that name a program git runs for
#: Procession's calls (a filter, a text conversion, a merge driver, a signing program): what
#: they name may run (``_held``); a program named by any other key does not.
USERS_PROGRAMS = re.compile(r"filter\..+\.(clean|smudge|process)|diff\..+\.textconv|merge\..+\.driver"
                            r"|gpg(\..+)?\.program", re.DOTALL)
#: What git runs a command through when it holds a space or a shell character (git's own list).
SHELL_CHARACTERS = frozenset("|&;<>()$`\\\"' \t\n*?[#~=%")
#: The program each signing format runs when the user's configuration names none.
SIGNERS = {"openpgp": "gpg", "x509": "gpgsm", "ssh": "ssh-keygen"}


def _held(cmd: list[str], settings: list[tuple[str, str, str | None]]) -> list[str]:
    """``cmd`` started through the launcher (``kernel.landlock``), executing nothing but git
    itself and the user's own programs (as the module says); as it is where the kernel has no
    Landlock."""
    from ..kernel import landlock

    if _landlock() < 1:
        return cmd
    runs = [*_git_itself(), *_users_programs(settings)]
    return [sys.executable, "-I", "-S", os.path.realpath(landlock.__file__), "-a", "/",
            *[word for path in runs for word in ("-r", path)], "--", *cmd]


@cache
def _landlock() -> int:
    from ..kernel import landlock

    return landlock.abi()


@cache
def _git_itself() -> tuple[str, ...]:
    """What of git may run: its binary, its own programs, and the loader that runs them."""
    found = {os.path.realpath(shutil.which("git") or "git")}
    where = subprocess.run(["git", "--exec-path"], capture_output=True, text=True, timeout=TIMEOUT_S).stdout.strip()
    if where:
        found.add(os.path.realpath(where))
    for pattern in ("/lib64/ld-*.so*", "/lib/ld-*.so*", "/lib/*/ld-*.so*", "/usr/lib/*/ld-linux*.so*"):
        found |= {os.path.realpath(p) for p in glob.glob(pattern)}
    return tuple(sorted(found))


def _users_programs(settings: list[tuple[str, str, str | None]]) -> list[str]:
    """The programs the user's own configuration names for git to run (``USERS_PROGRAMS``, and
    the signer a signed commit needs), each found on ``PATH``; ``/bin/sh`` too where git runs
    one of them through the shell."""
    users = {key.lower(): value for scope, key, value in settings if scope in ("system", "global")}
    commands = [value for key, value in users.items() if value and USERS_PROGRAMS.fullmatch(key)]
    if any(users.get(key) in (None, "true", "yes", "on", "1") for key in ("commit.gpgsign", "tag.gpgsign")
           if key in users):
        fmt = users.get("gpg.format") or "openpgp"
        commands.append(users.get(f"gpg.{fmt}.program") or users.get("gpg.program") or SIGNERS.get(fmt, "gpg"))
    found = []
    for command in commands:
        try:
            words = shlex.split(command)
        except ValueError:
            continue
        program = shutil.which(words[0]) if words else None
        if program:
            found.append(os.path.realpath(program))
        if SHELL_CHARACTERS & set(command):
            found.append(os.path.realpath("/bin/sh"))
    return found


def _settings(listing: bytes) -> list[tuple[str, str, str | None]]:
    """``(scope, key, value)`` of every setting ``config --list --show-scope -z`` lists, in the
    order git reads them; a key written with no value (a boolean's true) has None."""
    items = _text(listing).split("\0")
    found: list[tuple[str, str, str | None]] = []
    for scope, entry in zip(items[::2], items[1::2]):
        key, newline, value = entry.partition("\n")
        found.append((scope, key, value if newline else None))
    return found


def _refused(cmd: list[str], cwd: str | None, env: dict[str, str],
             settings: list[tuple[str, str, str | None]]) -> None:
    """``GitError`` for what a value on the command line cannot undo. A conditional include
    (``includeIf.*.path``): its condition (the branch, the git folder) may hold in a git that
    git starts (a new worktree's checkout, on its own branch) and not in the listing, which
    would not have judged what it includes. A ``core.worktree`` naming a folder that is not the
    repository's own (whose ``.git`` leads back to it): git reads it from the file itself, and
    would check out, merge and read there, outside the session's folder."""
    own = [key for scope, key, _ in settings if scope in REPOSITORY]
    for key in own:
        if key.lower().startswith("includeif.") and key.lower().endswith(".path"):
            raise GitError(f"the repository's own configuration includes a file on a condition ({key}), which"
                           " Procession's own git does not follow: include it without one, or from your own")
    if "core.worktree" not in own:
        return
    where = _git(cmd, cwd, env, "rev-parse", "--path-format=absolute", "--show-toplevel", "--git-dir")
    if where.returncode != 0:
        raise GitError(f"the repository's own configuration sets core.worktree, and git cannot use it ({said(where)})")
    top, _, git_dir = _text(where.stdout).strip().partition("\n")
    dot = os.path.join(top, ".git")
    if os.path.isfile(dot):  # a gitfile: "gitdir: <path>", relative to the folder it is in
        with open(dot, encoding="utf-8", errors="surrogateescape") as gitfile:
            dot = os.path.join(top, gitfile.read().removeprefix("gitdir:").strip())
    if not os.path.exists(dot) or not os.path.samefile(dot, git_dir):
        raise GitError(f"the repository's own configuration sets core.worktree to {top}, which is not the"
                       " repository's own folder: Procession's own git works in no other")


def _unread(settings: list[tuple[str, str, str | None]]) -> dict[str, str]:
    """The value to give each key the repository's own configuration sets and ``READ`` does
    not name: the user's own last one (system, global), else empty; none for a key the command
    line already sets (Procession's, its caller's), as that value is read after the repository's."""
    users: dict[str, str] = {}
    commanded: set[str] = set()
    for scope, key, value in settings:
        if scope in ("system", "global"):
            users[key] = "true" if value is None else value  # a key with no value is a boolean's true
        elif scope == "command":
            commanded.add(key)
    return {key: users.get(key, "") for scope, key, _ in settings
            if scope in REPOSITORY and not READ.fullmatch(key.lower()) and key not in commanded}


def _pairs(env: dict[str, str], values: dict[str, str]) -> dict[str, str]:
    """``values`` as git's ``GIT_CONFIG_KEY_n``/``GIT_CONFIG_VALUE_n`` pairs, after the caller's
    own: a key is passed whole, whatever its name holds (``-c`` would split a name holding ``=``)."""
    count = env.get("GIT_CONFIG_COUNT", "")
    given = int(count) if count.isdigit() else 0
    pairs = {"GIT_CONFIG_COUNT": str(given + len(values))} if values else {}
    for n, (key, value) in enumerate(values.items(), start=given):
        pairs[f"GIT_CONFIG_KEY_{n}"], pairs[f"GIT_CONFIG_VALUE_{n}"] = key, value
    return pairs


def _explained(proc: subprocess.CompletedProcess[bytes], unread: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    """``proc``, and when the line ``said`` finds in it names a key of the repository's own
    configuration that was not read (git then speaks of the command line), that line again
    last, saying where the key is read from: a caller that reads ``said`` says it too."""
    line = said(proc)
    named = [key for key in unread if key.lower() in line.lower()]
    if not named:
        return proc
    why = (f"{line} (Procession's own git does not read the repository's own {named[0]}:"
           " set it in your own configuration, e.g. git config --global)")
    return subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout, proc.stderr + b"\n" + why.encode())


def said(proc: subprocess.CompletedProcess[bytes]) -> str:
    """The line of git's output that says why (its last ``fatal:``/``error:`` line, else the last)."""
    out = [line.strip() for line in _text(proc.stderr + proc.stdout).splitlines() if line.strip()]
    for line in reversed(out):
        if line.startswith(("fatal:", "error:")):
            return line
    return out[-1] if out else ""


def _text(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


def _lines(data: bytes) -> list[str]:
    return [line for line in _text(data).split("\0") if line]


def repo(folder: str) -> Repo | None:
    """The repository ``folder`` is in, or None when it is in none (or git is missing)."""
    if shutil.which("git") is None or not os.path.isdir(folder):
        return None
    proc = run(folder, "rev-parse", "--path-format=absolute", "--show-toplevel", "--git-dir", "--git-common-dir",
               check=False)
    if proc.returncode != 0:
        return None
    top, git_dir, common = _text(proc.stdout).splitlines()[:3]
    branch = run(folder, "symbolic-ref", "--quiet", "--short", "HEAD", check=False)
    head = run(folder, "rev-parse", "--verify", "--quiet", "HEAD^{commit}", check=False)
    return Repo(top, git_dir, common, _text(branch.stdout).strip() or None, _text(head.stdout).strip() or None)


def tips(common_dir: str, branch: str) -> dict[str, str]:
    """The commit at the tip of ``branch`` (``*``: of every branch), by branch name; an absent
    branch is absent. Read through the refs machinery, so loose, packed and reftable refs are
    all seen alike."""
    pattern = "refs/heads" if branch == "*" else f"refs/heads/{branch}"
    out = run(None, "for-each-ref", "--format=%(refname:lstrip=2)%00%(objectname)", pattern, git_dir=common_dir)
    found: dict[str, str] = {}
    for line in _text(out.stdout).splitlines():
        name, _, sha = line.partition("\0")
        if branch == "*" or name == branch:
            found[name] = sha
    return found


def is_ancestor(common_dir: str, old: str, new: str) -> bool:
    return run(None, "merge-base", "--is-ancestor", old, new, git_dir=common_dir, check=False).returncode == 0


def commits(common_dir: str, old: str | None, new: str, branch: str) -> tuple[list[Commit], int]:
    """The commits ``new`` has that ``old`` has not (oldest first, at most ``COMMITS_LISTED``,
    the newest kept) with the paths each changed (a merge: against its first parent), and
    how many more there were. With no ``old`` (a branch new to the trigger), the commits on
    no other branch."""
    limits = ["--not", f"--exclude={branch}", "--branches"] if old is None else ["--not", old]
    out = run(None, "log", "-z", "--format=%x1e%H %s", "--name-only", "--diff-merges=first-parent", "--no-renames",
              "--reverse", f"-n{COMMITS_LISTED + 1}", new, *limits, git_dir=common_dir)
    found: list[Commit] = []
    for record in _text(out.stdout).split("\x1e")[1:]:
        head, _, rest = record.partition("\0")
        sha, _, subject = head.partition(" ")
        found.append(Commit(sha, subject, tuple(p for p in rest.lstrip("\n").split("\0") if p)))
    if len(found) <= COMMITS_LISTED:
        return found, 0
    total = int(_text(run(None, "rev-list", "--count", new, *limits, git_dir=common_dir).stdout).strip())
    return found[-COMMITS_LISTED:], total - COMMITS_LISTED


def subject(common_dir: str, sha: str) -> str:
    return _text(run(None, "log", "-1", "--format=%s", sha, git_dir=common_dir).stdout).strip()


def uncommitted(top: str, *, untracked: bool = True) -> list[str]:
    """Paths with changes not committed in the worktree ``top``: modified, staged, deleted, or
    (``untracked``) untracked and not ignored."""
    out = run(top, "status", "--porcelain=v1", "-z", f"--untracked-files={'all' if untracked else 'no'}")
    paths, entries = [], _lines(out.stdout)
    i = 0
    while i < len(entries):
        entry = entries[i]
        paths.append(entry[3:])
        i += 2 if entry[:1] in ("R", "C") else 1  # a rename's next field is the path it came from
    return paths


def merge_tree(top: str, ours: str, theirs: str) -> tuple[str, dict[str, str]]:
    """Git's three-way merge of branch ``theirs`` into ``ours``, computed without touching any
    worktree or ref (``merge-tree --write-tree``, the ``ort`` merge): the merged tree, and the
    conflicting paths with what kind of conflict each is (``content``, ``modify/delete``...)."""
    proc = run(top, "merge-tree", "--write-tree", "-z", "--name-only", ours, theirs, check=False)
    if proc.returncode not in (0, 1):
        raise GitError(said(proc) or "git merge-tree failed")
    fields = _text(proc.stdout).split("\0")
    tree, conflicted, i = fields[0], {}, 1
    while i < len(fields) and fields[i]:
        conflicted[fields[i]] = "content"
        i += 1
    i += 1
    while i < len(fields) and fields[i].isdigit():  # messages: <n> <paths...> <type> <message>
        n = int(fields[i])
        paths, kind = fields[i + 1:i + 1 + n], fields[i + 1 + n]
        for path in paths:
            if path in conflicted and kind.startswith("CONFLICT"):
                conflicted[path] = kind[kind.find("(") + 1:kind.rfind(")")] or conflicted[path]
        i += n + 3
    return tree, conflicted


def diff_names(top: str, old: str, new: str) -> list[tuple[str, str]]:
    """``(status, path)`` of what differs from ``old`` to ``new`` (A added, M modified, D deleted, T type)."""
    fields = _lines(run(top, "diff", "--name-status", "-z", "--no-renames", old, new).stdout)
    return [(fields[i][:1], fields[i + 1]) for i in range(0, len(fields) - 1, 2)]


def stages(top: str, path: str) -> set[int]:
    """Which sides of a merge in progress have ``path``: 1 base, 2 ours, 3 theirs."""
    out = _lines(run(top, "ls-files", "-u", "-z", "--", path).stdout)
    return {int(line.split("\t", 1)[0].split()[2]) for line in out}


def unmerged(top: str) -> list[str]:
    return sorted({line.split("\t", 1)[1] for line in _lines(run(top, "ls-files", "-u", "-z").stdout)})


def untracked(top: str) -> list[str]:
    return _lines(run(top, "ls-files", "-z", "--others", "--exclude-standard").stdout)


def branch_name_ok(top: str, name: str) -> bool:
    return run(top, "check-ref-format", "--branch", name, check=False).returncode == 0


def has_branch(top: str, name: str) -> bool:
    return run(top, "show-ref", "--verify", "--quiet", f"refs/heads/{name}", check=False).returncode == 0


def relative(path: str, top: str) -> str:
    """``path`` (absolute) as a path inside the worktree ``top``; "" for ``top`` itself."""
    rel = os.path.relpath(path, top)
    return "" if rel == "." else rel


