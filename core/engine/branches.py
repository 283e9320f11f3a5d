"""A fork's git worktree on its way to another host (``move``): its branch and its files.

A worktree is a branch of a repository, so its folder alone is not enough on the other host:
the old host's engine bundles the branch (``git bundle``, all of its history: the clone on
the other host may lack any of it) beside the packed files; the new host's engine fetches it
into the clone there (the repository's path moved by ``--map``, which must be a clone of the
same project), makes a worktree of that branch without checking anything out, puts the
carried files in it and sets its index to the branch's commit. What was committed is the
branch; what was not is the carried files, shown by ``git status`` as changes (all of them
unstaged: what was staged there is not told apart). The old host then removes its worktree
as any moved folder (only if unchanged) and its branch, only if still at the commit that
was carried.

The bundle comes from the store, so it is fetched as git fetches from a stranger: objects
checked (``transfer.fsckObjects``), into the one branch the move names, which must be one
of Procession's (``procession/...``) and absent there (or at the carried commit already).
"""

from __future__ import annotations

import os
import shutil
import tempfile

from ..calls import gitrepo
from ..calls.worktrees import BRANCHES
from ..model.errors import ProcessionError
from .packing import MoveFailed, ready, unpacked

def bundle(common: str, branch: str, limit: int) -> tuple[bytes, str]:
    """``branch`` of the repository ``common`` as a bundle of all its history, and its tip."""
    try:
        tip = gitrepo.tips(common, branch).get(branch)
        if tip is None:
            raise MoveFailed(f"its branch {branch} is not in the repository {common} any more: nothing to carry")
        with tempfile.TemporaryDirectory(prefix="procession-bundle-") as tmp:
            path = os.path.join(tmp, "branch.bundle")
            gitrepo.run(None, "bundle", "create", "-q", path, f"refs/heads/{branch}", git_dir=common)
            if os.path.getsize(path) > limit:
                raise MoveFailed(f"its branch {branch} holds more than {limit // 2**20} MiB of history, more than a"
                                 " move carries through the store: push it to the other host's clone yourself")
            with open(path, "rb") as fh:
                return fh.read(), tip
    except gitrepo.GitError as exc:
        raise MoveFailed(f"its branch {branch} could not be bundled ({exc})") from None


def place(data: bytes | None, pack: bytes, common: str, branch: str, tip: str, folder: str) -> bool:
    """The worktree made at ``folder`` on ``branch`` of the repository ``common`` here,
    fetched from ``data``, holding the files of ``pack``; whether the branch was made (it may
    be there already, at ``tip``). ``MoveFailed`` if it cannot be; then nothing is left of it."""
    if not branch.startswith(BRANCHES) or gitrepo.run(None, "check-ref-format", f"refs/heads/{branch}",
                                                    check=False).returncode != 0:
        raise MoveFailed(f"{branch[:80]!r} is not a fork's branch: the move carries none other")
    if gitrepo.run(None, "rev-parse", "--git-dir", git_dir=common, check=False).returncode != 0:
        raise MoveFailed(f"there is no git repository at {common} on this host: clone the repository there, or move"
                         " the session with --map OLD=NEW to the folder of its clone")
    there = gitrepo.tips(common, branch).get(branch)
    if there is not None and there != tip:
        raise MoveFailed(f"the repository {common} has a branch {branch} already, at another commit ({there[:12]}):"
                         " rename or delete it there, then move the session again")
    ready(folder)
    if there is None and not data:
        raise MoveFailed(f"the move carries no bundle of {branch}: nothing was made")
    made_branch = made_tree = False
    files = None
    try:
        if there is None:
            with tempfile.TemporaryDirectory(prefix="procession-bundle-") as tmp:
                path = os.path.join(tmp, "branch.bundle")
                with open(path, "wb") as fh:
                    fh.write(data or b"")
                gitrepo.run(None, "-c", "transfer.fsckObjects=true", "fetch", "-q", "--no-tags", path,
                            f"refs/heads/{branch}:refs/heads/{branch}", git_dir=common)
            made_branch = True
            if gitrepo.tips(common, branch).get(branch) != tip:
                raise MoveFailed(f"the bundle carried {branch} at another commit than {tip[:12]}: nothing was kept")
        files = unpacked(pack, folder)
        if any(name == ".git" for name in os.listdir(files)):
            raise MoveFailed("the carried files hold a .git of their own: nothing was kept")
        gitrepo.run(None, "worktree", "add", "-q", "--no-checkout", folder, branch, git_dir=common)
        made_tree = True
        for name in os.listdir(files):
            os.rename(os.path.join(files, name), os.path.join(folder, name))
        gitrepo.run(folder, "reset", "-q")
    except BaseException as exc:
        take_back(common, branch if made_branch else None, tip, folder if made_tree else None)
        if isinstance(exc, (gitrepo.GitError, OSError)):
            raise MoveFailed(f"its worktree could not be made at {folder} ({exc})") from None
        raise
    finally:
        if files is not None:
            shutil.rmtree(files, ignore_errors=True)
    return made_branch


def take_back(common: str, branch: str | None, tip: str, folder: str | None) -> None:
    """Undo ``place``: the worktree at ``folder`` removed, files and all (they are the carried
    ones: the session is still the old host's), and the ``branch`` it made, if still at ``tip``."""
    if folder is not None:
        gitrepo.run(None, "worktree", "remove", "--force", folder, git_dir=common, check=False)
        shutil.rmtree(folder, ignore_errors=True)
        gitrepo.run(None, "worktree", "prune", git_dir=common, check=False)
    if branch is not None:
        gitrepo.run(None, "update-ref", "-d", f"refs/heads/{branch}", tip, git_dir=common, check=False)


def let_go(common: str, branch: str, tip: str) -> str | None:
    """The old host's part once the worktree's folder is removed: git forgets the worktree,
    and the branch goes if it is still at ``tip`` (else it stays, and this says so)."""
    gitrepo.run(None, "worktree", "prune", git_dir=common, check=False)
    try:
        gitrepo.run(None, "update-ref", "-d", f"refs/heads/{branch}", tip, git_dir=common)
    except ProcessionError:  # git's refusal: the branch moved on
        return (f"its branch {branch} stays in {common}: it is not at the commit carried ({tip[:12]}) any more;"
                " delete it yourself when done with it")
    return None
