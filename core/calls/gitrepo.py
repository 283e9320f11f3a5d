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
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass

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


#: What Procession's own git runs without, whatever the repository's configuration says: hooks
#: and the file system monitor run a program the repository names, and a repository a session
#: works in is one its step could write (its ``.git`` is in the session's folder), so they
#: would run what a confined step left, outside its bounds (a merge's commit, a fork's
#: ``worktree add``, a ``status``, a ref's update).
UNHOOKED = ("-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false")
#: What git runs that the repository's own configuration may name a program for: a filter
#: (``clean``, ``smudge``, ``process``), a diff or merge driver, a signing program. Named
#: there (not in the user's own configuration, whose filters, such as Git LFS's, stay), it is
#: cleared for the subcommands that would run it: a filter and a diff driver then do nothing
#: (the file as it is), a merge driver or a signing program fails the merge whole.
PROGRAMS = re.compile(r"filter\..+\.(clean|smudge|process)|diff\..+\.(command|textconv)|diff\.external"
                      r"|merge\..+\.driver|gpg\.program|gpg\..+\.program", re.IGNORECASE | re.DOTALL)
#: The subcommands (of those Procession runs) that may run one.
FILTERING = frozenset({"add", "apply", "checkout", "commit", "diff", "merge", "merge-tree", "reset", "status",
                       "worktree"})


def _env() -> dict[str, str]:
    return {**os.environ, "LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0"}


def run(cwd: str | None, *args: str, git_dir: str | None = None, check: bool = True,
        input: bytes | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    """``git args`` in ``cwd`` (or on the repository ``git_dir``), with ``env`` added to the
    environment; ``GitError`` when it fails and ``check`` is set."""
    if shutil.which("git") is None:
        raise GitError("git is not installed (or not on PATH)")
    cmd = ["git", "-c", "core.quotePath=false", *UNHOOKED]
    if git_dir is not None:
        cmd.append(f"--git-dir={git_dir}")
    base = {**_env(), **(env or {})}
    try:
        if args and args[0] in FILTERING:
            base.update(_programs_cleared(cmd, cwd, base))
        proc = subprocess.run([*cmd, *args], cwd=cwd, capture_output=True, env=base, input=input, timeout=TIMEOUT_S)
    except FileNotFoundError:
        raise GitError(f"{cwd} does not exist") from None
    except NotADirectoryError:
        raise GitError(f"{cwd} is not a folder") from None
    except subprocess.TimeoutExpired:
        raise GitError(f"git {args[0]} took longer than {TIMEOUT_S:g} s") from None
    if check and proc.returncode != 0:
        raise GitError(said(proc) or f"git {args[0]} exited {proc.returncode}")
    return proc


def _programs_cleared(cmd: list[str], cwd: str | None, env: dict[str, str]) -> dict[str, str]:
    """The environment that clears every ``PROGRAMS`` setting of the repository's own
    configuration (and what it includes), as git's ``GIT_CONFIG_KEY_n`` pairs: a key is passed
    whole, whatever its name holds (``-c`` would split a name holding ``=``)."""
    listed = subprocess.run([*cmd, "config", "--list", "--show-scope", "--name-only", "-z"], cwd=cwd,
                            capture_output=True, env=env, timeout=TIMEOUT_S)
    items = _lines(listed.stdout)
    keys = [key for scope, key in zip(items[::2], items[1::2]) if scope in ("local", "worktree")
            and PROGRAMS.fullmatch(key)]
    count = env.get("GIT_CONFIG_COUNT", "")
    given = int(count) if count.isdigit() else 0
    cleared = {"GIT_CONFIG_COUNT": str(given + len(keys))} if keys else {}
    for n, key in enumerate(keys, start=given):  # after the caller's own pairs, if any
        cleared[f"GIT_CONFIG_KEY_{n}"], cleared[f"GIT_CONFIG_VALUE_{n}"] = key, ""
    return cleared


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


