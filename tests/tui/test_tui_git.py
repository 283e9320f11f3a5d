"""The monitor on git-aware sessions: a commit trigger from the trigger form, a fork into its own
worktree from the fork dialog, a merge whose files conflict, a cancel that removes the worktree.
Every call is checked in the store and in the repository."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual.widgets import RadioButton

from conftest import until
from procession import State, Workspace
from procession.tui.detail import Detail
from procession.tui.dialogs import FILE, ActionMenu, Confirm, Conflicts, Form
from support.git import Repo, git_identity  # noqa: F401  (the fixture, used by every test here)
from support.monitor import answer, keys, to

SIZE = (160, 45)


pytestmark = pytest.mark.usefixtures("git_identity")


async def eventually(predicate: Any) -> Any:
    """Soon, on a quiet machine; git's own work (a checkout) can take seconds on a loaded one
    (the wait's ceiling is a hang guard: ``support.wait.HANG_S``)."""
    return await until(predicate, interval=0.01)


async def test_commit_trigger_fork_into_a_worktree_and_merge_its_files(monitor, tmp_path: Path) -> None:
    repo = Repo.init(tmp_path / "repo", {"notes.md": "base\n", "src/a.py": "a = 1\n"})
    db = tmp_path / "ws.db"
    store = await Workspace.open(db, actor="test")
    sid = (await store.spawn("docs", "docs", cwd=str(repo.path))).sid
    app = await monitor(db)
    async with app.run_test(size=SIZE) as pilot:
        await to(pilot, app, sid)
        await keys(pilot, "T")  # triggers: add, typed as on the command line
        await eventually(lambda: isinstance(app.screen, ActionMenu))
        await keys(pilot, "enter")
        await eventually(lambda: isinstance(app.screen, Form))
        await answer(pilot, app, f"commit {repo.path} --path 'src/**' --debounce 50")
        await eventually(lambda: app.said("trigger 1 added: commit"))
        (trig,) = (await store.info(sid)).triggers
        assert trig.spec["paths"] == ["src/**"] and trig.spec["debounce_ms"] == 50 and trig.spec["branch"] == "main"

        await keys(pilot, "f")  # fork, into a worktree of its own
        await eventually(lambda: isinstance(app.screen, Form))
        buttons = list(app.screen.query(RadioButton))
        assert [b.value for b in buttons] == [True, False, False]
        buttons[1].value = True
        await answer(pilot, app, "what if")
        await eventually(lambda: app.said("forked 1 into 2", "on branch procession/what-if"))
        child = await store.info(2)
        assert child.worktree is not None and child.worktree.branch == "procession/what-if"
        fork = Repo(Path(child.worktree.path))
        await eventually(lambda: app.table.cursor_key == 2)
        assert "[procession/what-if]" in app.table.render_line(app.table.index_of(2)).text
        await keys(pilot, "enter")  # its detail names its worktree
        await eventually(lambda: isinstance(app.screen, Detail) and app.screen.rev >= 0)
        summary = str(app.screen.query_one("#summary").render())
        assert "on branch procession/what-if" in summary
        await keys(pilot, "escape")

        fork.commit({"notes.md": "theirs\n", "src/b.py": "b = 1\n"}, "the fork's work")
        repo.commit({"notes.md": "ours\n"}, "the parent's work")
        await keys(pilot, "m")
        await eventually(lambda: isinstance(app.screen, Form))
        await keys(pilot, "enter")  # into its parent, prefilled
        await eventually(lambda: isinstance(app.screen, Conflicts))
        dialog = app.screen
        assert dialog.files == {"notes.md": "contents"} and not dialog.conflicts
        await keys(pilot, "t", "enter")
        await eventually(lambda: isinstance(app.screen, Confirm))  # what the merge does, before it does it
        assert "branch procession/what-if into main" in "\n".join(app.screen.body)
        assert dialog.choices == {FILE + "notes.md": ("theirs", "")}
        await keys(pilot, "y")
        await eventually(lambda: app.said("merged 2 into 1", "2 files changed"))
    assert repo.read("notes.md") == "theirs\n" and repo.read("src/b.py") == "b = 1\n"
    assert not fork.path.exists() and (await store.info(2)).reason == "merged"
    await store.close()


async def test_cancel_asks_whether_to_remove_the_worktree(monitor, tmp_path: Path) -> None:
    repo = Repo.init(tmp_path / "repo")
    db = tmp_path / "ws.db"
    store = await Workspace.open(db, actor="test")
    sid = (await store.spawn("docs", "docs", cwd=str(repo.path))).sid
    forked = await store.fork(sid, worktree=True)
    app = await monitor(db)
    async with app.run_test(size=SIZE) as pilot:
        await to(pilot, app, forked.sid)
        await keys(pilot, "C")
        await eventually(lambda: isinstance(app.screen, Confirm))
        await keys(pilot, "y")
        await eventually(lambda: isinstance(app.screen, ActionMenu))
        await keys(pilot, "down", "enter")  # remove it too
        await eventually(lambda: app.said("cancelled") or app.said("terminated"))
        assert app.said("its worktree", "and its branch procession/docs-2 are removed")
    assert (await store.info(forked.sid)).state is State.TERMINATED
    assert not Path(forked.worktree or "").exists()
    await store.close()
