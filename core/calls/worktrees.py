"""A fork's own folder: made by ``fork --worktree``, merged back by ``merge``, removed after.

When the parent's folder is in a git repository, the fork gets a **git worktree** on a new
branch (``procession/<fork name>``) at the parent's current commit, in a folder beside the
repository (``<repo>.forks/<fork name>``); its folder is the parent's, there. Merging the fork
merges that branch into the branch checked out in the target's folder with git's own
three-way merge. Outside git the fork gets a **copy** of the folder (``<folder>.forks/...``;
reflinks where the file system has them), with a manifest of what was copied: merging it
back is a three-way merge of files (the manifest is the base), done file by file, all or
nothing: checked whole before anything changes, every change journaled and taken back
exactly if the merge fails or its call is refused.

Uncommitted changes in the parent's repository are refused, or carried into the worktree
(``carry``: the diff against HEAD applied there, untracked files copied). A fork's folder is
removed when the fork is merged, or cancelled with ``clean`` — never while it holds work that
would be lost: uncommitted changes in a worktree, or changed files in a copy that is not
being merged. A branch with commits on no other branch is kept (and said so).

All of this is file and git work, synchronous: the calls run it on a worker thread, outside
the store's write lock; what is made before a call's transaction is undone if it is refused.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from ..model import beneath
from ..model.errors import InvalidArgument, ProcessionError
from ..model.records import MISSING, FileMerge
from ..model.text import plural
from ..model.trigger_spec import IGNORED_DIRS
from . import gitrepo
from .merge import Resolution, three_way

#: Linux's FICLONE ioctl: the destination shares the source's blocks (btrfs, XFS, bcachefs...).
FICLONE = 0x40049409
#: What every fork's branch is called under.
BRANCHES: Final = "procession/"
#: Paths a refusal names before "and N more".
NAMED = 5


@dataclass(slots=True, frozen=True)
class Made:
    """A fork's folder, made before the fork's transaction (undone if that is refused)."""

    kind: str  # "git" | "copy"
    path: str  # what was made: the worktree's top, or the copy
    folder: str  # the fork's folder in it
    source: str  # the parent's folder
    repo: str | None  # git: the common git folder of the repository
    branch: str | None  # git: the fork's new branch
    base: str  # git: the commit it starts at; copy: the manifest of what was copied (JSON)
    source_top: str | None = None  # git: the top of the parent's worktree, and its branch
    source_branch: str | None = None
    carried: tuple[str, ...] = ()
    databases: tuple[str, ...] = ()  # copy: SQLite databases copied as one consistent snapshot each
    left_out: tuple[str, ...] = ()  # copy: the workspace's own database (and its side files), not copied

    def journal(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": self.path, "branch": self.branch, "carried": len(self.carried)}


# ---------------------------------------------------------------- making one


def make(folder: str, name: str, carry: bool, workspace: str) -> Made:
    """A worktree (or a copy) of ``folder`` for a fork called ``name`` (``workspace``: the
    workspace's own database file, which a copy never takes)."""
    if not os.path.isdir(folder):
        raise InvalidArgument(f"the session's folder {folder} does not exist: there is nothing to fork it from")
    found = gitrepo.repo(folder)
    return _make_worktree(found, folder, name, carry) if found is not None else _make_copy(folder, name, workspace)


def _make_worktree(found: gitrepo.Repo, folder: str, name: str, carry: bool) -> Made:
    if found.head is None:
        raise InvalidArgument(f"{found.top} has no commit yet: commit once, then fork into a worktree")
    dirty = gitrepo.uncommitted(found.top)
    if dirty and not carry:
        raise InvalidArgument(f"{found.top} has uncommitted changes ({named(dirty)}): commit them, or fork with"
                              " --carry to take them into the fork's worktree")
    slug = _slug(name)
    branch = f"{BRANCHES}{slug}"
    n = 2
    while gitrepo.has_branch(found.top, branch):
        branch, n = f"{BRANCHES}{slug}-{n}", n + 1
    if not gitrepo.branch_name_ok(found.top, branch):
        raise InvalidArgument(f"cannot name a branch after the fork {name!r}: give it another name")
    path = _free(Path(found.top).parent / f"{Path(found.top).name}.forks" / slug)
    path.parent.mkdir(exist_ok=True)
    gitrepo.run(found.top, "worktree", "add", "-q", "-b", branch, str(path), found.head)
    made = Made("git", str(path), str(path / gitrepo.relative(os.path.realpath(folder), found.top)), folder,
                found.common_dir, branch, found.head, found.top, found.branch, tuple(dirty))
    try:
        if dirty:
            _carry(found.top, str(path))
        os.makedirs(made.folder, exist_ok=True)  # a folder git does not track is not checked out
    except BaseException:
        undo(made)
        raise
    return made


def _carry(top: str, into: str) -> None:
    """The uncommitted changes of the worktree ``top`` made in the worktree ``into`` too: the
    diff against HEAD (staged and not) applied there, untracked files copied."""
    diff = gitrepo.run(top, "diff", "--binary", "--no-ext-diff", "--no-textconv", "HEAD").stdout  # no program it names
    if diff:
        gitrepo.run(into, "apply", "--whitespace=nowarn", "-", input=diff)
    for rel in gitrepo.untracked(top):
        target = Path(into) / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(Path(top) / rel, target, follow_symlinks=False)


def _make_copy(folder: str, name: str, workspace: str) -> Made:
    path = _free(Path(folder).parent / f"{Path(folder).name}.forks" / _slug(name))
    path.parent.mkdir(exist_ok=True)
    made = Made("copy", str(path), str(path), folder, None, None, "{}")
    try:
        databases, left_out = copy_tree(folder, str(path), leave=os.path.realpath(workspace))
        base = manifest(str(path))  # what the copy holds, as made: the folder may change meanwhile
    except BaseException:
        undo(made)
        raise
    return dataclasses.replace(made, base=json.dumps(base, sort_keys=True), databases=tuple(databases),
                               left_out=tuple(left_out))


def undo(made: Made) -> None:
    """Take back what ``make`` made (its fork was refused)."""
    if made.kind == "git":
        gitrepo.run(made.source_top, "worktree", "remove", "--force", made.path, check=False)
        gitrepo.run(made.source_top, "branch", "-D", made.branch or "", check=False)
    shutil.rmtree(made.path, ignore_errors=True)
    _drop_empty(Path(made.path).parent)


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:40].strip("-") or "fork"


def _free(path: Path) -> Path:
    candidate, n = path, 2
    while candidate.exists():
        candidate, n = path.with_name(f"{path.name}-{n}"), n + 1
    return candidate


def _drop_empty(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:
        pass


def named(paths: Sequence[str]) -> str:
    """``a.txt, b.txt and 3 more``."""
    shown = ", ".join(paths[:NAMED])
    return shown + (f" and {len(paths) - NAMED} more" if len(paths) > NAMED else "")


# ---------------------------------------------------------------- copies


def copy_tree(source: str, target: str, leave: str | None = None) -> tuple[list[str], list[str]]:
    """Copy a folder, symlinks as symlinks, each file a reflink where the file system allows
    (the copy then shares the file's blocks until either side writes), else a plain copy. A
    SQLite database is copied through SQLite (one consistent snapshot, never a file caught
    mid-write), without its side files (``-wal``, ``-shm``, ``-journal``: the snapshot holds
    what they held); the database ``leave`` (the workspace's own) is not copied at all.
    Returns the databases copied and the paths left out, relative to ``source``."""
    cloning = [True]
    databases: list[str] = []
    left_out: list[str] = []

    def skipped(here: str, names: list[str]) -> set[str]:
        gone = set()
        for name in names:
            if os.path.realpath(os.path.join(here, name)) == leave:
                gone |= {name, *(name + side for side in SQLITE_SIDES)}
                left_out.append(os.path.relpath(os.path.join(here, name), source))
            elif side_of_database(here, name, names):
                gone.add(name)  # the database's snapshot holds what it held
        return gone

    def clone(src: str, dst: str) -> None:
        if not stat.S_ISREG(os.lstat(src).st_mode):  # a FIFO would block the copy, a device is no file
            left_out.append(os.path.relpath(src, source))
            return
        if is_sqlite(src):
            snapshot_database(src, dst)
            databases.append(os.path.relpath(src, source))
            return
        if cloning[0]:
            try:
                with open(src, "rb") as fin, open(dst, "wb") as fout:
                    fcntl.ioctl(fout.fileno(), FICLONE, fin.fileno())
                shutil.copystat(src, dst)
                return
            except OSError as exc:
                if exc.errno not in (errno.EOPNOTSUPP, errno.EXDEV, errno.EINVAL, errno.ENOTTY, errno.ENOSYS):
                    raise
                cloning[0] = False  # this file system cannot: plain copies from now on
        shutil.copy2(src, dst)

    shutil.copytree(source, target, symlinks=True, copy_function=clone, ignore=skipped)
    return sorted(databases), sorted(left_out)


#: The files SQLite keeps beside a database while it is open or mid-transaction.
SQLITE_SIDES = ("-wal", "-shm", "-journal")


def side_of_database(here: str, name: str, names: Sequence[str]) -> bool:
    """Whether ``name`` is a side file of a database beside it (``app.db-wal`` by ``app.db``)."""
    return any(name.endswith(side) and name[: -len(side)] in names and is_sqlite(os.path.join(here, name[: -len(side)]))
               for side in SQLITE_SIDES)


def is_sqlite(path: str) -> bool:
    """Whether ``path`` is a regular file (not a link, a FIFO that would block the read, a
    device) that begins as every SQLite database does."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return False
    with os.fdopen(fd, "rb") as fh:
        return stat.S_ISREG(os.fstat(fd).st_mode) and fh.read(16) == b"SQLite format 3\x00"


def snapshot_database(src: str, dst: str) -> None:
    """One consistent copy of a SQLite database that may be in use (SQLite's backup: what was
    committed when it ran, whatever a writer does meanwhile)."""
    import sqlite3

    try:
        with contextlib.closing(sqlite3.connect(f"file:{src}?mode=ro", uri=True, timeout=10)) as fin, \
                contextlib.closing(sqlite3.connect(dst)) as fout:
            fin.backup(fout)
    except sqlite3.Error as exc:
        raise ProcessionError(f"could not copy the database {src} consistently ({exc}): nothing was forked") from None


def gits_own(name: str) -> bool:
    """Whether a path's component is one git takes for its own folder (``.git``, as a file it
    makes any folder a worktree of another repository, whose configuration git then runs),
    however a file system may spell it (case, trailing dots and spaces, an 8.3 short name)."""
    plain = name.lower().rstrip(". ")
    return plain in (".git", "git~1")


def manifest(folder: str) -> dict[str, str]:
    """Every file and link under ``folder`` by its path there, with a digest of its content (a
    link: where it points), but for the folders tools fill with churn, what git takes for
    its own (``gits_own``) and a database's side files: a fork's copy never brings those back."""
    found: dict[str, str] = {}
    for here, dirs, names in os.walk(folder):
        links = [d for d in dirs if os.path.islink(os.path.join(here, d))]  # listed, not walked into
        dirs[:] = [d for d in dirs if d not in IGNORED_DIRS and not gits_own(d) and d not in links]
        for name in [*names, *links]:
            if gits_own(name) or side_of_database(here, name, names):  # never a merge's to bring
                continue
            path = os.path.join(here, name)
            rel = os.path.relpath(path, folder)
            if os.path.islink(path):
                found[rel] = "link:" + os.readlink(path)
                continue
            digest = hashlib.sha256()
            try:
                with beneath.Folder(here) as parent, os.fdopen(parent.regular(name), "rb") as fh:
                    for chunk in iter(lambda: fh.read(1 << 20), b""):
                        digest.update(chunk)
            except (OSError, ProcessionError):
                continue  # gone, or not a regular file: nothing a merge copies
            found[rel] = digest.hexdigest()
    return found


def _copy_changes(record: Any) -> list[str]:
    base = json.loads(record["base"])
    now = manifest(record["path"]) if os.path.isdir(record["path"]) else {}
    return sorted(p for p in base.keys() | now.keys() if base.get(p) != now.get(p))


# ---------------------------------------------------------------- what it holds, removing it


def unsaved(record: Any) -> list[str]:
    """The work a fork's folder holds that removing it would lose: uncommitted paths of a
    worktree, changed files of a copy."""
    if not os.path.isdir(record["path"]):
        return []
    if record["kind"] == "git":
        return gitrepo.uncommitted(record["path"])
    return _copy_changes(record)


def remove(record: Any) -> list[str]:
    """Remove a fork's folder (the caller has made sure it holds nothing unsaved); a worktree's
    branch goes too unless it has commits on no other branch. Returns what to tell."""
    path, notes = record["path"], []
    if record["kind"] == "copy":
        shutil.rmtree(path, ignore_errors=True)
        _drop_empty(Path(path).parent)
        return [f"its copy {path} is removed"]
    common, branch = record["repo"], record["branch"]
    if os.path.isdir(path):
        gitrepo.run(None, "worktree", "remove", path, git_dir=common)
    else:
        gitrepo.run(None, "worktree", "prune", git_dir=common)
    _drop_empty(Path(path).parent)
    unique = gitrepo.run(None, "rev-list", "--count", branch, "--not", f"--exclude={branch}", "--branches",
                         git_dir=common, check=False)
    count = int(unique.stdout.strip() or 0) if unique.returncode == 0 else 0
    if unique.returncode != 0:
        notes.append(f"its worktree {path} is removed (its branch {branch} was gone already)")
    elif count:
        notes.append(f"its worktree {path} is removed; its branch {branch} is kept: {plural(count, 'commit')} on no"
                     f" other branch (git branch -D {branch} deletes them)")
    else:
        gitrepo.run(None, "branch", "-D", branch, git_dir=common)
        notes.append(f"its worktree {path} and its branch {branch} are removed")
    return notes


# ---------------------------------------------------------------- merging it back


@dataclass(slots=True)
class FilePlan:
    """What merging a fork's folder into a target's folder takes, read before anything is done."""

    summary: FileMerge
    record: dict[str, Any]
    top: str  # git: the target's worktree; copy: the target's folder
    updates: dict[str, bool] = field(default_factory=dict)  # copy: path -> brought over (False: deleted)


@dataclass(slots=True)
class Applied:
    """A file merge done, until its call commits (``finish``) or is refused (``take_back``)."""

    plan: FilePlan
    before: str | None = None  # git: the target's commit before the merge
    commit: str | None = None  # git: the merge commit (None: nothing to merge)
    backups: str | None = None  # copy: the folder holding what the merge moved out of the target's
    journal: list[tuple[str, str, str]] = field(default_factory=list)  # copy: each change, to undo (see _apply_copy)


def gone(record: Any) -> bool:
    """Whether nothing is left of a fork's folder to merge: a copy removed by hand, a worktree
    removed with its branch deleted (a worktree removed alone still has its branch to merge)."""
    if os.path.isdir(record["path"]):
        return False
    if record["kind"] == "copy":
        return True
    found = gitrepo.run(None, "show-ref", "--verify", "--quiet", f"refs/heads/{record['branch']}",
                        git_dir=record["repo"], check=False)
    return found.returncode != 0


def plan(record: Any, source: int, target: int, folder: str, resolution: Resolution) -> FilePlan:
    """What merging session ``source``'s folder (``record``, not ``gone``) into ``folder``
    (session ``target``'s) would change and where it conflicts; refused while the fork holds
    uncommitted work or the target cannot take the merge."""
    record = dict(record)
    if record["kind"] == "git":
        return _plan_git(record, source, target, folder, resolution)
    return _plan_copy(record, source, target, folder, resolution)


def _side(resolution: Resolution, path: str) -> str | None:
    return (resolution.files or {}).get(path, resolution.side)


def _plan_git(record: dict[str, Any], source: int, target: int, folder: str, resolution: Resolution) -> FilePlan:
    path, branch = record["path"], record["branch"]
    dirty = gitrepo.uncommitted(path) if os.path.isdir(path) else []
    if dirty:
        raise ProcessionError(f"session {source}'s worktree {path} has uncommitted changes ({named(dirty)}): commit"
                              f" them on its branch {branch}, or discard them, then merge")
    found = gitrepo.repo(folder)
    if found is None or os.path.realpath(found.common_dir) != os.path.realpath(record["repo"]):
        raise ProcessionError(f"session {target}'s folder {folder} is not in the repository of session {source}'s"
                              f" worktree ({path}): its branch {branch} cannot be merged there")
    if found.branch is None:
        raise ProcessionError(f"HEAD is detached in {found.top} (session {target}'s folder): check out the branch"
                              f" to merge {branch} into")
    if found.branch == branch:
        raise ProcessionError(f"{found.top} has session {source}'s branch {branch} checked out itself")
    changed = gitrepo.uncommitted(found.top, untracked=False)
    if changed:
        raise ProcessionError(f"session {target}'s folder {found.top} has uncommitted changes ({named(changed)}):"
                              " commit or stash them, then merge")
    tree, conflicted = gitrepo.merge_tree(found.top, found.branch, branch)
    changes = gitrepo.diff_names(found.top, found.branch, tree)
    resolved = {p: side for p in conflicted if (side := _side(resolution, p)) in ("ours", "theirs")}
    summary = FileMerge("git", path, branch, found.top, found.branch, tuple(changes),
                        {p: kind for p, kind in conflicted.items() if p not in resolved}, resolved)
    return FilePlan(summary, record, found.top)


def _plan_copy(record: dict[str, Any], source: int, target: int, folder: str, resolution: Resolution) -> FilePlan:
    if os.path.realpath(folder) != os.path.realpath(record["source"]):
        raise ProcessionError(f"session {source}'s copy was made from {record['source']}, and session {target} works"
                              f" in {folder}: merge it into a session working in {record['source']}")

    def text(m: dict[str, str]) -> dict[str, str]:  # as three_way compares them: JSON texts
        return {k: json.dumps(v) for k, v in m.items()}

    ours = manifest(folder)
    base = {p: v for p, v in json.loads(record["base"]).items() if not any(gits_own(c) for c in p.split("/"))}
    changes, conflicts, resolved = three_way(text(base), text(ours), text(manifest(record["path"])),
                                             Resolution(resolution.side, resolution.files))
    kinds = {p: "deleted here, changed in the fork" if o is MISSING else "changed here, deleted in the fork"
             if t is MISSING else "added on both sides" if b is MISSING else "changed on both sides"
             for p, (b, o, t) in conflicts.items()}
    theirs = manifest(record["path"])
    leading_out = sorted(p for p, v in changes.items() if v is not MISSING and _leads_out(p, theirs[p]))
    if leading_out:
        raise ProcessionError(f"session {source}'s copy holds symbolic links that lead out of {folder}"
                              f" ({named(leading_out)}): a merge never brings one; remove or change them in"
                              f" {record['path']}, then merge")
    updates = {p: v is not MISSING for p, v in changes.items()}
    _refuse_obstacles(folder, record["path"], updates)
    statuses = tuple(("D" if v is MISSING else "M" if p in ours else "A", p) for p, v in sorted(changes.items()))
    summary = FileMerge("copy", record["path"], None, folder, None, statuses, kinds,
                        {p: str(side) for p, side in resolved.items()})
    return FilePlan(summary, record, folder, updates)


def apply(plan: FilePlan, message: str) -> Applied:
    """Do the file merge ``plan`` says (with no conflict left unsettled): git's merge, then
    each settled path taken from its side, committed with ``message`` (as the user, or as
    Procession where they have no identity: ``_identity``); or the copy's files
    brought over, the ones they replace kept aside until ``finish``."""
    if plan.summary.kind == "copy":
        return _apply_copy(plan)
    top, branch = plan.top, plan.record["branch"]
    applied = Applied(plan, before=gitrepo.run(top, "rev-parse", "HEAD").stdout.decode().strip())
    who = _identity(top, plan.record["session_id"])
    merged = gitrepo.run(top, "merge", "--no-ff", "--no-commit", "-m", message, branch, check=False, env=who)
    if gitrepo.run(top, "rev-parse", "-q", "--verify", "MERGE_HEAD", check=False).returncode != 0:
        if merged.returncode != 0:
            raise gitrepo.GitError(gitrepo.said(merged))
        return applied  # already up to date: the branch has nothing the target lacks
    try:
        for path, side in plan.summary.resolved.items():
            stages = gitrepo.stages(top, path)
            if (2 if side == "ours" else 3) in stages:
                gitrepo.run(top, "checkout", f"--{side}", "--", path)
                gitrepo.run(top, "add", "--", path)
            else:
                gitrepo.run(top, "rm", "-q", "-f", "--", path)
        left = gitrepo.unmerged(top)
        if left:
            raise ProcessionError(f"git's merge left {named(left)} unmerged in {top}: nothing was merged")
        gitrepo.run(top, "commit", "-q", "--no-edit", "--no-verify", env=who)
    except BaseException:
        gitrepo.run(top, "merge", "--abort", check=False)
        raise
    applied.commit = gitrepo.run(top, "rev-parse", "HEAD").stdout.decode().strip()
    return applied


#: Who authors and commits a merge's commit where the user has no identity (``_identity``).
NAMELESS: Final = ("Procession (session {sid})", "procession@localhost")


def _identity(top: str, sid: int) -> dict[str, str]:
    """The environment that names who makes the merge of session ``sid``'s branch in ``top``:
    nothing where the user's identity (their configuration's or the repository's
    ``user.name`` and ``user.email``, or ``GIT_AUTHOR_*``/``GIT_COMMITTER_*``) is there, as
    their own commits have it; else Procession, for the session, as author or committer or
    both. Why: the merge commit is Procession's own, and git refuses to make one with no
    identity (``unable to auto-detect email address``) or would guess one from the host;
    ``user.useConfigOnly`` makes git say which is missing rather than guess."""
    name, email = NAMELESS[0].format(sid=sid), NAMELESS[1]
    who: dict[str, str] = {}
    for role in ("AUTHOR", "COMMITTER"):
        if gitrepo.run(top, "-c", "user.useConfigOnly=true", "var", f"GIT_{role}_IDENT", check=False).returncode:
            who |= {f"GIT_{role}_NAME": name, f"GIT_{role}_EMAIL": email}
    return who


def _leads_out(rel: str, entry: str) -> bool:
    """Whether a manifest's ``entry`` for ``rel`` is a link that leads out of its folder."""
    if not entry.startswith("link:"):
        return False
    target = entry[len("link:"):]
    if os.path.isabs(target):
        return True
    return os.path.normpath(os.path.join(os.path.dirname(rel), target)).split("/")[0] == ".."


def _refuse_obstacles(folder: str, fork: str, updates: dict[str, bool]) -> None:
    """Refuse, changing nothing, a copy merge that ``folder`` cannot take whole (``_obstacles``)."""
    with beneath.Folder(folder, "the target's folder") as target:
        found = _obstacles(target.fd, updates)
    if found:
        shown = "; ".join(found[:NAMED]) + (f" and {len(found) - NAMED} more" if len(found) > NAMED else "")
        raise ProcessionError(f"{folder} cannot take the fork's files as they are ({shown}): nothing was merged;"
                              f" change them there or in the fork's folder {fork}, then merge")


def _obstacles(root: int, updates: dict[str, bool]) -> list[str]:
    """What in the target's folder (``root``, a descriptor) stands in the way of ``updates``
    (path -> brought, or deleted), one phrase each: a link or a file where the fork has a
    folder, a folder holding more than the merge deletes where the fork has a file, a FIFO,
    a socket or a device where the merge changes a path. None: the merge can be made whole."""
    found: list[str] = []
    for rel in sorted(updates):
        parts, mode = rel.split("/"), None
        for n in range(1, len(parts) + 1):
            path = "/".join(parts[:n])
            try:
                mode = os.stat(path, dir_fd=root, follow_symlinks=False).st_mode
            except FileNotFoundError:
                mode = None
                break
            except OSError as exc:
                found.append(f"{path}: cannot be looked at ({exc.strerror})")
                mode = None
                break
            if n < len(parts) and not stat.S_ISDIR(mode):
                if path not in updates:  # one the merge sets aside holds nothing of the target's
                    found.append(f"{path}: {beneath.what(mode)} where the fork has a folder")
                mode = None
                break
        if mode is None or stat.S_ISREG(mode) or stat.S_ISLNK(mode):
            continue
        if not stat.S_ISDIR(mode):
            found.append(f"{rel}: {beneath.what(mode)}, which a merge never replaces")
        elif not updates[rel]:
            found.append(f"{rel}: a folder where the fork deletes a file")
        elif kept := [p for p in _held(root, rel) if updates.get(p) is not False]:
            found.append(f"{rel}: a folder holding {named(kept)} where the fork has a file")
    return found


def _held(root: int, folder: str) -> list[str]:
    """Everything but folders under ``folder`` beneath ``root`` (links not followed)."""
    held: list[str] = []
    for top, dirs, names, fd in os.fwalk(folder, dir_fd=root, follow_symlinks=False):
        for name in sorted(dirs + names):  # a link to a folder is listed among dirs, never walked into
            if not stat.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                held.append(f"{top}/{name}")
    return held


def _apply_copy(plan: FilePlan) -> Applied:
    """Bring a copy's changed files back into the target's folder, whole or not at all.

    Everything is checked before anything changes (``_obstacles``). Then each change is
    journaled as it is made, so that ``take_back`` restores exactly what was there: what a
    path held (a file, a link, a folder the fork replaced by a file) is moved aside by rename
    (its bytes, mode and times kept) into a private folder beside the target's, deepest
    first; then each brought file is made in folders made as needed. Every folder of the
    target's is opened without following a link (``beneath.descend``), every entry made with
    ``O_EXCL``: no link there is followed or written through. A fork's file is read without
    following a link out of the fork, with its permission bits, never a set-id or sticky bit;
    a link comes as a link, never one leading out. A failure (a full disk, a permission)
    takes it all back before it is said."""
    folder, fork = plan.top, plan.record["path"]
    _refuse_obstacles(folder, fork, plan.updates)
    applied = Applied(plan, backups=tempfile.mkdtemp(prefix=".procession-merge-", dir=Path(folder).parent))
    rel = "."
    try:
        with beneath.Folder(folder, "the target's folder") as target, \
                beneath.Folder(fork, "the fork's folder") as source, _opened(applied.backups or "") as aside:
            for rel in sorted(plan.updates, reverse=True):
                _set_aside(applied, target.fd, aside, rel)
            for rel in sorted(p for p, brought in plan.updates.items() if brought):
                _bring(applied, source, target.fd, rel)
    except BaseException as exc:
        take_back(applied)
        if isinstance(exc, OSError):
            raise ProcessionError(f"{folder} could not take the fork's files ({rel}: {exc.strerror or exc}): nothing"
                                  " was merged, and every file there is as it was") from None
        raise
    return applied


@contextlib.contextmanager
def _opened(folder: str) -> Iterator[int]:
    """A folder Procession made, as a descriptor (not through a link)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


def _set_aside(applied: Applied, root: int, aside: int, rel: str) -> None:
    """What the target holds at ``rel`` moved into the folder ``aside``, journaled; nothing if
    nothing is there (or it is under a link or a file set aside already)."""
    head, _, name = rel.rpartition("/")
    try:
        parent = beneath.descend(root, head)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
            return
        raise
    try:
        try:
            mode = os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
        except FileNotFoundError:
            return
        if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)) and not (
                stat.S_ISDIR(mode) and applied.plan.updates[rel] and not _held(root, rel)):
            raise ProcessionError(f"{rel}: {beneath.what(mode)} in {applied.plan.top} changed as it was merged:"
                                  " nothing was merged")
        key = str(len(applied.journal))
        os.rename(name, key, src_dir_fd=parent, dst_dir_fd=aside)
        applied.journal.append(("aside", rel, key))
    finally:
        os.close(parent)


def _bring(applied: Applied, source: beneath.Folder, root: int, rel: str) -> None:
    """The fork's ``rel`` made in the target's folder ``root`` (a descriptor), journaled: a
    link as a link, a regular file's bytes and permission bits (not setuid, setgid or sticky)."""
    head, _, name = rel.rpartition("/")
    here = beneath.descend(root, head, made=lambda path: applied.journal.append(("made", path, "")))
    try:
        parent = source.open(head or ".", os.O_PATH | os.O_DIRECTORY)
        try:
            if stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
                target = os.readlink(name, dir_fd=parent)
                if _leads_out(rel, "link:" + target):
                    raise ProcessionError(f"{rel}: a symbolic link of the fork's that leads out, made as it was"
                                          " merged: nothing was merged")
                os.symlink(target, name, dir_fd=here)
                applied.journal.append(("put", rel, ""))
                return
        finally:
            os.close(parent)
        with os.fdopen(source.regular(rel), "rb") as fin:
            mode = os.fstat(fin.fileno()).st_mode & 0o777
            out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=here)
            applied.journal.append(("put", rel, ""))
            with os.fdopen(out, "wb") as fout:
                shutil.copyfileobj(fin, fout, 1 << 20)
                os.fchmod(fout.fileno(), mode)
    finally:
        os.close(here)


def take_back(applied: Applied) -> None:
    """Undo a file merge whose call was refused after it was done (or that failed as it was
    made): a git merge reset; a copy merge's journal undone, last change first, each path
    restored as it was. What was set aside is removed only once all of it is back; else it
    is kept, and the error says where."""
    top = applied.plan.top
    if applied.plan.summary.kind == "git":
        if applied.commit and applied.before:
            gitrepo.run(top, "reset", "-q", "--keep", applied.before, check=False)
        return
    failed: list[str] = []
    with beneath.Folder(top, "the target's folder") as target, _opened(applied.backups or "") as aside:
        for change, rel, key in reversed(applied.journal):
            head, _, name = rel.rpartition("/")
            try:
                here = beneath.descend(target.fd, head)
                try:
                    if change == "put":
                        os.unlink(name, dir_fd=here)
                    elif change == "made":
                        os.rmdir(name, dir_fd=here)
                    else:
                        os.rename(key, name, src_dir_fd=aside, dst_dir_fd=here)
                finally:
                    os.close(here)
            except OSError as exc:
                failed.append(f"{rel} ({exc.strerror})")
    if failed:
        raise ProcessionError(f"the merge into {top} could not be taken back whole ({named(failed)}): what it had"
                              f" replaced is kept in {applied.backups}")
    finish(applied)


def finish(applied: Applied) -> None:
    """The merge's call committed: what a copy merge kept aside goes."""
    if applied.backups:
        shutil.rmtree(applied.backups, ignore_errors=True)
