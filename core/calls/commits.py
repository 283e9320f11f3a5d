"""What a commit trigger follows, what it has seen, and what is new since.

A commit trigger follows one branch of a repository (or every branch, ``*``), optionally
only commits that touch paths matching globs. It remembers the tip of each branch it saw
(``state.tips``), so that whatever moved the branch — a commit, a pull, a merge, a rebase,
an amend, a commit made in another worktree, an engine that was not running — the next look
lists exactly the commits the branch gained since, once. A repository that disappears or a
branch that is deleted is a ``problem`` on the trigger, not an error: the trigger waits.

Everything here runs git (``gitrepo``), so it is synchronous: callers run it on a thread.
"""

from __future__ import annotations

import os
from typing import Any

from ..model.errors import InvalidArgument
from . import gitrepo
from .gitrepo import GitError
from .watched import compile_pattern


def follow(spec: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """A commit trigger's spec completed with what git says of its repository (its top
    folder, its common git folder, the branch checked out when none is named), the state it
    starts from (the tips as they are now: nothing before the trigger fires it), and notes."""
    found = gitrepo.repo(spec["repo"])
    if found is None:
        raise InvalidArgument(f"{spec['repo']} is not in a git repository" + ("" if os.path.isdir(spec["repo"]) else
                                                                               " (it does not exist)"))
    branch = spec["branch"] or found.branch
    if branch is None:
        raise InvalidArgument(f"HEAD is detached in {found.top}: name the branch to follow with --branch"
                              " (or --branch '*' for every branch)")
    if branch != "*" and not gitrepo.branch_name_ok(found.top, branch):
        raise InvalidArgument(f"{branch!r} is not a valid branch name")
    full = {"repo": found.top, "branch": branch, "paths": spec["paths"], "debounce_ms": spec["debounce_ms"],
            "git": found.common_dir}
    tips = gitrepo.tips(found.common_dir, branch)
    notes = []
    if branch != "*" and branch not in tips:
        notes.append(f"{found.top} has no branch {branch} yet: its first commits will fire the trigger")
    shown = branch if branch != "*" else found.branch
    last = None
    if shown in tips:
        last = {"branch": shown, "id": tips[shown], "subject": gitrepo.subject(found.common_dir, tips[shown])}
    return full, {"tips": tips, "last": last, "problem": None}, notes


def look(spec: dict[str, Any], seen: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """What is new since ``seen``: the state to remember, and one cause per branch that gained
    commits the trigger wants (none when only other paths changed, or a branch moved back).

    A cause is ``{repo, branch, old, new, commits: [{id, subject}], paths}`` (``old`` None for a
    branch new to the trigger), with ``more_commits``/``more_paths`` when there were more
    than it lists, and ``rewritten`` when ``old`` is no longer in the branch (amend, rebase,
    reset). Never raises for what happened to the repository: that is the state's ``problem``.
    A trigger that has never looked (a fork's copy, a trigger loaded from a snapshot) takes
    the tips as they are and fires nothing: it starts from there, as a new trigger does.
    """
    before: dict[str, str] = seen.get("tips") or {}
    branch, repo, common = spec["branch"], spec["repo"], spec["git"]
    state = {"tips": before, "last": seen.get("last"), "problem": None}
    if not os.path.isdir(common):
        return {**state, "problem": f"the repository {repo} is gone (its git folder {common} is not there)"}, []
    try:
        now = gitrepo.tips(common, branch)
    except GitError as exc:
        return {**state, "problem": f"git cannot read {repo}: {exc}"}, []
    if "tips" not in seen:  # a trigger that never looked (a fork's copy, a loaded one): it starts from now
        state["tips"] = now
        if branch in now:
            state["last"] = {"branch": branch, "id": now[branch], "subject": gitrepo.subject(common, now[branch])}
        return state, []
    if branch != "*" and branch not in now and branch in before:
        state["problem"] = f"branch {branch} is gone from {repo} (deleted or renamed): the trigger waits for it"
    state["tips"] = dict(now) if branch == "*" else {**before, **now}
    globs = [compile_pattern("/" + p) for p in spec["paths"]]
    causes = []
    for name, tip in sorted(now.items()):
        old = before.get(name)
        if old == tip:
            continue
        try:
            listed, more = gitrepo.commits(common, old, tip, name)
        except GitError:  # the old tip is gone from the repository (rewritten, then collected)
            listed, more, old = *gitrepo.commits(common, None, tip, name), None
        subject = listed[-1].subject if listed and listed[-1].id == tip else gitrepo.subject(common, tip)
        state["last"] = {"branch": name, "id": tip, "subject": subject}
        if globs:
            listed = [c for c in listed if any(g.match("/" + p) for p in c.paths for g in globs)]
        if not listed:
            continue
        paths = sorted({p for c in listed for p in c.paths if not globs or any(g.match("/" + p) for g in globs)})
        cause: dict[str, Any] = {"repo": repo, "branch": name, "old": old, "new": tip,
                                 "commits": [{"id": c.id, "subject": c.subject} for c in listed],
                                 "paths": paths[:gitrepo.PATHS_LISTED]}
        if more:
            cause["more_commits"] = more
        if len(paths) > gitrepo.PATHS_LISTED:
            cause["more_paths"] = len(paths) - gitrepo.PATHS_LISTED
        if old is not None and not gitrepo.is_ancestor(common, old, tip):
            cause["rewritten"] = True
        causes.append(cause)
    return state, causes
