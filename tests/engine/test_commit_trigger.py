"""Commit triggers on real repositories: what fires, once, with what cause, and what does not.

Every test makes its repositories with the real ``git`` in a temporary folder and runs a real
engine; nothing sleeps: a test waits for the run, or for the trigger to have seen a commit
(its state in the store), before it looks at what did not happen.
"""

from __future__ import annotations

import asyncio
import re
import shutil
from pathlib import Path

import pytest

from conftest import until
from procession import InvalidArgument, Workspace
from procession.engine import Engine
from procession.present.lines import trigger_kinds
from support.git import Repo, git_identity  # noqa: F401  (the fixture, used by every test here)


pytestmark = pytest.mark.usefixtures("git_identity")


async def ended_runs(ws: Workspace, sid: int, n: int):
    runs = [r for r in await ws.runs(sid) if r.ended]
    return runs if len(runs) >= n else None


async def seen(ws: Workspace, sid: int, sha: str):
    """The session's commit trigger has seen ``sha`` (fired or not)."""
    trig = next(t for t in (await ws.info(sid)).triggers if t.kind == "commit")
    last = trig.seen.get("last")
    return trig if last and last["id"] == sha else None


async def problem(ws: Workspace, sid: int):
    trig = next(t for t in (await ws.info(sid)).triggers if t.kind == "commit")
    return trig.seen.get("problem")


def subjects(cause: dict) -> list[str]:
    return [c["subject"] for c in cause["commits"]]


async def test_a_commit_wakes_the_session_with_what_it_changed(live, engine, tmp_path):
    repo = Repo.init(tmp_path / "repo", {"src/a.py": "a = 1\n", "README.md": "hi\n"})
    sid = (await live.spawn("docs", "docs", cwd=str(repo.path))).sid
    added = await live.trigger_add(sid, "commit", paths=["src/**"])
    assert added.trigger.spec["branch"] == "main" and added.trigger.spec["repo"] == str(repo.path)
    old = repo.head()
    # committed at once: the engine takes the trigger in after the add, and looks once its watch is in place
    new = repo.commit({"src/a.py": "a = 2\n", "src/b.py": "b = 1\n"}, "change a, add b")
    runs = await until(lambda: ended_runs(live, sid, 1))
    cause = runs[0].cause[0]
    assert cause == {"kind": "commit", "trigger": added.trigger.id, "repo": str(repo.path), "branch": "main",
                     "old": old, "new": new, "commits": [{"id": new, "subject": "change a, add b"}],
                     "paths": ["src/a.py", "src/b.py"]}

    readme = repo.commit({"README.md": "outside --path\n"}, "docs only")
    await until(lambda: seen(live, sid, readme))  # looked at: nothing in src/, no run
    repo.git("switch", "-q", "-c", "topic")
    repo.commit({"src/a.py": "a = 3\n"}, "on another branch")
    repo.git("switch", "-q", "main")
    amended = repo.commit({"src/c.py": "c = 1\n"}, "add c")
    runs = await until(lambda: ended_runs(live, sid, 2))
    assert subjects(runs[1].cause[0]) == ["add c"] and runs[1].cause[0]["old"] == readme  # the topic commit: not here

    repo.write({"src/c.py": "c = 2\n"})
    repo.git("commit", "-q", "-a", "--amend", "-m", "add c (amended)")
    runs = await until(lambda: ended_runs(live, sid, 3))
    cause = runs[2].cause[0]
    assert subjects(cause) == ["add c (amended)"] and cause["rewritten"] is True and cause["old"] == amended
    assert len(await live.runs(sid)) == 3


async def test_rebase_pull_other_worktree_and_packed_refs(live, engine, tmp_path):
    repo = Repo.init(tmp_path / "repo", {"src/a.py": "a = 1\n"})
    sid = (await live.spawn("docs", "docs", cwd=str(repo.path))).sid
    await live.trigger_add(sid, "commit", [str(repo.path)])
    await until(lambda: seen(live, sid, repo.head()))

    # a rebase onto a branch with two commits: one firing, naming every commit main gained
    repo.git("switch", "-q", "-c", "base")
    repo.commit({"src/x.py": "x\n"}, "x on base")
    repo.commit({"src/y.py": "y\n"}, "y on base")
    repo.git("switch", "-q", "main")
    mine = repo.commit({"src/m.py": "m\n"}, "mine")
    runs = await until(lambda: ended_runs(live, sid, 1))
    assert subjects(runs[0].cause[0]) == ["mine"]
    repo.git("rebase", "-q", "base")
    runs = await until(lambda: ended_runs(live, sid, 2))
    cause = runs[1].cause[0]
    assert subjects(cause) == ["x on base", "y on base", "mine"] and cause["rewritten"] is True
    assert cause["old"] == mine

    # a pull from a second clone
    clone = Repo(tmp_path / "clone")
    repo.git("clone", "-q", str(repo.path), str(clone.path))
    clone.commit({"src/pulled.py": "p\n"}, "made in the clone")
    repo.git("pull", "-q", "--ff-only", str(clone.path), "main")
    runs = await until(lambda: ended_runs(live, sid, 3))
    assert subjects(runs[2].cause[0]) == ["made in the clone"]

    # a commit made in another worktree of the same repository, on the followed branch
    repo.git("switch", "-q", "base")
    other = Repo(tmp_path / "other")
    repo.git("worktree", "add", "-q", str(other.path), "main")
    other.commit({"src/w.py": "w\n"}, "from the other worktree")
    runs = await until(lambda: ended_runs(live, sid, 4))
    assert subjects(runs[3].cause[0]) == ["from the other worktree"]

    # packed refs: gc packs main (no new commit: nothing fires), then a commit on top is seen
    repo.git("gc", "-q")
    assert "refs/heads/main" in (repo.path / ".git" / "packed-refs").read_text()
    packed = other.commit({"src/after_gc.py": "g\n"}, "after gc")
    runs = await until(lambda: ended_runs(live, sid, 5))
    assert subjects(runs[4].cause[0]) == ["after gc"] and runs[4].cause[0]["new"] == packed
    assert len(await live.runs(sid)) == 5


async def test_commits_made_while_no_engine_ran_are_caught_up_once(db, live, tmp_path):
    repo = Repo.init(tmp_path / "repo")
    sid = (await live.spawn("docs", "docs", cwd=str(repo.path))).sid
    await live.trigger_add(sid, "commit")
    old = repo.head()
    for n in range(3):
        repo.commit({f"f{n}.txt": f"{n}\n"}, f"commit {n}")
    eng = Engine(db, grace=0.3)
    stop = asyncio.Event()
    task = asyncio.ensure_future(eng.serve(stop))
    try:
        runs = await until(lambda: ended_runs(live, sid, 1))
        cause = runs[0].cause[0]
        assert cause["catch_up"] is True and cause["old"] == old and cause["new"] == repo.head()
        assert subjects(cause) == ["commit 0", "commit 1", "commit 2"]
        assert cause["paths"] == ["f0.txt", "f1.txt", "f2.txt"]
    finally:
        stop.set()
        await task
    eng = Engine(db, grace=0.3)  # started again with nothing new: no second catch-up
    await eng.start()
    assert eng.triggers is not None and eng.triggers.commits is not None
    await asyncio.gather(*eng.triggers.commits._looking)
    await eng.shutdown()
    assert len(await live.runs(sid)) == 1


async def test_every_branch_and_a_branch_or_repository_that_goes(live, engine, tmp_path):
    repo = Repo.init(tmp_path / "repo")
    anyone = (await live.spawn("any", "docs", cwd=str(repo.path))).sid
    await live.trigger_add(anyone, "commit", branch="*")
    follower = (await live.spawn("topic", "docs", cwd=str(repo.path))).sid
    repo.git("branch", "topic")
    await live.trigger_add(follower, "commit", branch="topic")
    await until(lambda: seen(live, follower, repo.head()))
    # The commit first, then a branch at it: one change of the refs (``switch -c`` then a commit
    # is two, and the watch may see the branch before its commit, so that it is not new then).
    repo.git("switch", "-q", "--detach")
    repo.commit({"f.txt": "f\n"}, "on feature")
    repo.git("switch", "-q", "-c", "feature")
    runs = await until(lambda: ended_runs(live, anyone, 1))
    assert runs[0].cause[0]["branch"] == "feature" and subjects(runs[0].cause[0]) == ["on feature"]
    assert runs[0].cause[0]["old"] is None  # a branch new to the trigger: the commits on no other branch

    repo.git("branch", "-D", "topic")
    assert "topic is gone" in await until(lambda: problem(live, follower))
    info = await live.info(follower)
    assert "commit(!)" in trigger_kinds(info)
    repo.git("branch", "topic")  # back: the problem clears
    await until(lambda: _no_problem(live, follower))

    shutil.rmtree(repo.path)
    assert "is gone" in await until(lambda: problem(live, anyone))
    assert engine.triggers is not None and engine.triggers.commits is not None
    await until(lambda: anyone_gone(engine))
    assert (await live.info(anyone)).state.value == "sleeping"  # reported, not crashed on


def anyone_gone(engine: Engine) -> bool:
    assert engine.triggers is not None and engine.triggers.commits is not None
    return bool(engine.triggers.commits.gone)


async def _no_problem(ws: Workspace, sid: int) -> bool:
    return await problem(ws, sid) is None


async def test_adding_a_commit_trigger_checks_the_repository(ws, tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    sid = (await ws.spawn("s", "a", cwd=str(plain))).sid
    with pytest.raises(InvalidArgument, match="is not in a git repository"):
        await ws.trigger_add(sid, "commit")
    repo = Repo.init(tmp_path / "repo")
    repo.git("switch", "-q", "--detach")
    with pytest.raises(InvalidArgument, match="HEAD is detached.*--branch"):
        await ws.trigger_add(sid, "commit", [str(repo.path)])
    with pytest.raises(InvalidArgument, match="bad --path"):
        await ws.trigger_add(sid, "commit", [str(repo.path)], branch="main", paths=["/abs/**"])
    with pytest.raises(InvalidArgument, match="apply to commit triggers only"):
        await ws.trigger_add(sid, "watch", [str(plain)], branch="main")
    added = await ws.trigger_add(sid, "commit", [str(repo.path / "sub" / "..")], branch="later")
    assert any("no branch later yet" in n.text for n in added.notes)
    assert added.trigger.spec["git"] == str(repo.path / ".git")


@pytest.mark.parametrize("inside, hint", [(".git/refs/heads", "use a commit trigger (trigger add SID commit"),
                                          (".git", "is not a git repository either: watch the files you mean"),
                                          ("node_modules/pkg", "inside node_modules"), (".venv", "inside .venv")])
async def test_a_watch_inside_an_ignored_folder_is_refused_with_a_hint(ws, tmp_path, inside, hint):
    if inside.startswith(".git/"):  # a repository: a commit trigger is the advice (none is, where there is none)
        (tmp_path / ".git").mkdir()
    sid = (await ws.spawn("s", "a", cwd=str(tmp_path))).sid
    with pytest.raises(InvalidArgument, match=re.escape(hint)) as refused:
        await ws.trigger_add(sid, "watch", [inside])
    assert "\n" not in str(refused.value)
    assert (await ws.info(sid)).triggers == ()


def test_the_ignored_folders_cover_the_watchers():
    from watchfiles import DefaultFilter

    from procession.calls import watched
    from procession.model.trigger_spec import IGNORED_DIRS

    assert set(DefaultFilter.ignore_dirs) <= IGNORED_DIRS and watched.IGNORED_DIRS is IGNORED_DIRS


async def test_a_fork_with_a_worktree_follows_its_own_branch(live, engine, tmp_path):
    repo = Repo.init(tmp_path / "repo")
    parent = (await live.spawn("docs", "docs", cwd=str(repo.path))).sid
    await live.trigger_add(parent, "commit")
    child = (await live.fork(parent, worktree=True)).sid
    await live.approve(child)
    info = await live.info(child)
    assert info.worktree is not None and info.triggers[0].spec["branch"] == "procession/docs-2"
    await until(lambda: seen(live, child, repo.head()))  # its first look starts from now: nothing fires
    fork = Repo(Path(info.worktree.path))
    fork.commit({"f.txt": "f\n"}, "in the fork")
    runs = await until(lambda: ended_runs(live, child, 1))
    assert runs[0].cause[0]["branch"] == "procession/docs-2" and subjects(runs[0].cause[0]) == ["in the fork"]
    repo.commit({"m.txt": "m\n"}, "on main")
    runs = await until(lambda: ended_runs(live, parent, 1))
    assert subjects(runs[0].cause[0]) == ["on main"]
    assert len(await live.runs(child)) == 1


async def test_the_demos_api_docs_wake_on_a_commit_to_src(tmp_path):
    from procession.cli import demo

    made = await demo.build(tmp_path / "demo.db")
    docs = Repo(made.folder / "apidocs")
    assert docs.git("status", "--porcelain") == ""  # API.md, written at each run, is ignored
    sid = made.sessions["api docs"]
    async with await Workspace.open(made.db) as ws:
        (trig,) = (await ws.info(sid)).triggers
        assert trig.kind == "commit" and trig.spec["paths"] == ["src/**"]
        eng = Engine(made.db, grace=0.3)
        stop = asyncio.Event()
        task = asyncio.ensure_future(eng.serve(stop))
        try:
            await until(lambda: seen(ws, sid, docs.head()))
            accounts = docs.read("src/ledger/accounts.py")
            docs.commit({"src/ledger/accounts.py": accounts + '\n\ndef closing(a):\n    """Closing balance."""\n'},
                        "Add closing")
            runs = await until(lambda: ended_runs(ws, sid, 1))
        finally:
            stop.set()
            await task
        assert runs[0].outcome == "ok"
        reply = (await ws.history(sid))[-1].content
        assert reply.startswith("API.md regenerated after 1 commit (Add closing) changing accounts.py")
    assert "`closing(a)` — Closing balance." in docs.read("API.md")
