"""Forks with a folder of their own: a git worktree on a new branch, or a copy outside git;
merged back with the memory (git's three-way merge, or file by file), removed after, never
while they hold work that would be lost. Real repositories in temporary folders."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from conftest import dump
from procession import Workspace
from procession.calls.merge import Resolution
from procession.model.errors import MergeConflict, ProcessionError
from procession.model.errors import InvalidArgument
from procession.model.states import State
from support.disk import fill, small_disk  # noqa: F401 - a fixture
from support.git import Repo, git_identity, quiet_env, session_in  # noqa: F401  (the fixture, used by every test here)


pytestmark = pytest.mark.usefixtures("git_identity")


async def test_a_fork_gets_its_own_worktree_and_the_parents_files_stay(ws, tmp_path):
    repo = Repo.init(tmp_path / "repo", {"notes.md": "parent\n", "src/a.py": "a = 1\n"})
    parent = await session_in(ws, repo.path)
    await ws.trigger_add(parent, "watch", ["src"])
    await ws.trigger_add(parent, "commit")
    forked = await ws.fork(parent, worktree=True)
    wt = tmp_path / "repo.forks" / "review-2"
    assert (forked.worktree, forked.branch) == (str(wt), "procession/review-2")
    info = await ws.info(forked.sid)
    assert info.worktree is not None and info.worktree.kind == "git" and info.worktree.branch == "procession/review-2"
    assert info.cwd == str(wt)
    detail = await ws.show(forked.sid)
    assert [(r.kind, r.uri) for r in detail.resources] == [("folder", str(wt)), ("file", str(wt / "notes.md"))]
    specs = {t.kind: t.spec for t in info.triggers}
    assert specs["watch"]["paths"] == [str(wt / "src")]
    assert (specs["commit"]["repo"], specs["commit"]["branch"]) == (str(wt), "procession/review-2")
    assert Repo(wt).git("branch", "--show-current") == "procession/review-2"
    assert Repo(wt).head() == repo.head()
    # both write a file; the parent's is its own
    (wt / "notes.md").write_text("the fork's notes\n")
    (repo.path / "notes.md").write_text("the parent's notes\n")
    assert repo.read("notes.md") == "the parent's notes\n" and Repo(wt).read("notes.md") == "the fork's notes\n"
    second = await ws.fork(parent, "what if", worktree=True, carry=True)  # the parent is dirty now: carried
    assert Repo(Path(second.worktree or "")).read("notes.md") == "the parent's notes\n"
    assert any("1 uncommitted change carried" in n.text for n in second.notes)


async def test_uncommitted_changes_are_refused_or_carried(ws, tmp_path):
    repo = Repo.init(tmp_path / "repo", {"notes.md": "v1\n", "gone.txt": "x\n"})
    parent = await session_in(ws, repo.path)
    repo.write({"notes.md": "v2, not committed\n", "new/untracked.txt": "u\n"})
    (repo.path / "gone.txt").unlink()
    before = dump(ws.path)
    with pytest.raises(InvalidArgument, match=r"uncommitted changes \(.*\): commit them, or fork with --carry"):
        await ws.fork(parent, worktree=True)
    assert dump(ws.path) == before and not (tmp_path / "repo.forks").exists()
    assert "procession/" not in repo.git("branch", "--list")
    carried = await ws.fork(parent, worktree=True, carry=True)
    fork = Repo(Path(carried.worktree or ""))
    assert fork.read("notes.md") == "v2, not committed\n" and fork.read("new/untracked.txt") == "u\n"
    assert not (fork.path / "gone.txt").exists()
    assert repo.read("notes.md") == "v2, not committed\n"  # the parent keeps its changes
    with pytest.raises(InvalidArgument, match="applies to a fork with a worktree only"):
        await ws.fork(parent, carry=True)


async def fork_with_a_commit(ws: Workspace, repo: Repo, parent: int, files: dict[str, str]) -> tuple[int, Repo]:
    forked = await ws.fork(parent, worktree=True)
    fork = Repo(Path(forked.worktree or ""))
    fork.commit(files, "the fork's work")
    await ws.memory_set(forked.sid, "verdict", "ship it")
    return forked.sid, fork


async def test_merge_merges_the_branch_with_the_memory_and_removes_the_worktree(ws, tmp_path):
    repo = Repo.init(tmp_path / "repo", {"notes.md": "parent\n"})
    parent = await session_in(ws, repo.path)
    child, fork = await fork_with_a_commit(ws, repo, parent, {"src/new.py": "n = 1\n"})
    await ws.send(child, "done in the worktree")
    plan = await ws.merge_plan(child, parent)
    assert plan.clean and plan.files is not None and plan.files.changes == (("A", "src/new.py"),)
    assert plan.memory_set == {"verdict": "ship it"} and plan.messages == 1
    assert dump(ws.path) == dump(ws.path) and not (repo.path / "src").exists()  # a dry run changes nothing
    work = fork.head()
    merged = await ws.merge(child, parent)
    assert merged.files == ("A src/new.py",) and merged.commit == repo.head()
    assert repo.read("src/new.py") == "n = 1\n"
    assert repo.git("log", "-1", "--format=%s") == "procession: merge session 2 (review #2) into session 1 (review)"
    assert repo.git("rev-parse", "HEAD^2") == work
    assert not fork.path.exists() and "procession/review-2" not in repo.git("branch", "--list")
    assert any("and its branch procession/review-2 are removed" in n.text for n in merged.notes)
    assert await ws.memory_get(parent, "verdict") == "ship it"
    assert (await ws.info(child)).worktree is None and (await ws.info(child)).reason == "merged"
    assert all(str(fork.path) not in r.uri for r in (await ws.show(parent)).resources)


async def test_file_conflicts_stop_the_merge_with_memory_ones_until_settled(ws, tmp_path):
    repo = Repo.init(tmp_path / "repo", {"notes.md": "base\n", "keep.md": "k\n"})
    parent = await session_in(ws, repo.path)
    child, fork = await fork_with_a_commit(ws, repo, parent, {"notes.md": "theirs\n", "other.md": "o\n"})
    repo.commit({"notes.md": "ours\n"}, "the parent's work")
    await ws.memory_set(parent, "verdict", "hold")
    head, before = repo.head(), dump(ws.path)
    with pytest.raises(MergeConflict) as refused:
        await ws.merge(child, parent)
    assert refused.value.files == {"notes.md": "contents"} and list(refused.value.conflicts) == ["verdict"]
    assert "2 unresolved conflicts: verdict, file notes.md" in str(refused.value)
    assert repo.head() == head and repo.read("notes.md") == "ours\n" and not (repo.path / "other.md").exists()
    assert dump(ws.path) == before and fork.path.exists()
    plan = await ws.merge_plan(child, parent, Resolution(picks={"verdict": "theirs"}))
    assert not plan.clean and plan.files is not None and plan.files.conflicts == {"notes.md": "contents"}
    merged = await ws.merge(child, parent, Resolution(picks={"verdict": "theirs"}, files={"notes.md": "theirs"}))
    assert repo.read("notes.md") == "theirs\n" and repo.read("other.md") == "o\n"
    assert merged.resolved == {"verdict": "theirs", "notes.md": "theirs"}
    assert await ws.memory_get(parent, "verdict") == "ship it"


async def test_conflicts_resolved_on_the_forks_branch_then_merged_again(ws, tmp_path):
    repo = Repo.init(tmp_path / "repo", {"notes.md": "base\n"})
    parent = await session_in(ws, repo.path)
    child, fork = await fork_with_a_commit(ws, repo, parent, {"notes.md": "theirs\n"})
    repo.commit({"notes.md": "ours\n"}, "the parent's work")
    with pytest.raises(MergeConflict):
        await ws.merge(child, parent)
    fork.git("merge", "-q", "main", check=False)
    fork.commit({"notes.md": "both, reconciled\n"}, "resolve")
    await ws.merge(child, parent)
    assert repo.read("notes.md") == "both, reconciled\n"


async def test_unsaved_work_is_never_removed(ws, tmp_path):
    repo = Repo.init(tmp_path / "repo", {"notes.md": "base\n"})
    parent = await session_in(ws, repo.path)
    child, fork = await fork_with_a_commit(ws, repo, parent, {"a.md": "a\n"})
    fork.write({"draft.md": "not committed\n"})
    before = dump(ws.path)
    with pytest.raises(ProcessionError, match=r"worktree .* has uncommitted changes \(draft.md\): commit them"):
        await ws.merge(child, parent)
    with pytest.raises(ProcessionError, match=r"holds uncommitted changes \(draft.md\).*without --clean"):
        await ws.cancel(child, clean=True)
    assert dump(ws.path) == before and (fork.path / "draft.md").exists()
    (fork.path / "draft.md").unlink()
    cancelled = await ws.cancel(child, clean=True)
    assert cancelled.state is State.TERMINATED and not fork.path.exists()
    assert any("branch procession/review-2 is kept: 1 commit on no other branch" in n.text for n in cancelled.notes)
    assert "procession/review-2" in repo.git("branch", "--list")
    other = (await ws.fork(parent, worktree=True)).sid  # without --clean: it stays, and the note says how to go
    stays = await ws.cancel(other)
    assert any("stays (branch procession/review-3): cancel with --clean" in n.text for n in stays.notes)
    assert (tmp_path / "repo.forks" / "review-3").exists()


async def test_outside_git_the_fork_gets_a_copy_merged_back_file_by_file(ws, tmp_path):
    folder = tmp_path / "plain"
    (folder / "sub").mkdir(parents=True)
    (folder / "notes.md").write_text("base\n")
    (folder / "sub" / "data.csv").write_text("1,2\n")
    (folder / "gone.txt").write_text("x\n")
    os.symlink("notes.md", folder / "link")
    parent = await session_in(ws, folder)
    forked = await ws.fork(parent, worktree=True)
    copy = Path(forked.worktree or "")
    assert copy == tmp_path / "plain.forks" / "review-2" and (await ws.info(forked.sid)).worktree.kind == "copy"
    assert (copy / "sub" / "data.csv").read_text() == "1,2\n" and os.readlink(copy / "link") == "notes.md"
    (copy / "sub" / "data.csv").write_text("1,2\n3,4\n")
    (copy / "added.md").write_text("new\n")
    (copy / "gone.txt").unlink()
    (copy / "notes.md").write_text("theirs\n")
    (folder / "notes.md").write_text("ours\n")
    assert (folder / "sub" / "data.csv").read_text() == "1,2\n"  # the parent's files are its own
    with pytest.raises(ProcessionError, match=r"copy .* holds changed files"):
        await ws.cancel(forked.sid, clean=True)
    with pytest.raises(MergeConflict) as refused:
        await ws.merge(forked.sid, parent)
    assert refused.value.files == {"notes.md": "changed on both sides"}
    assert not (folder / "added.md").exists()
    plan = await ws.merge_plan(forked.sid, parent, Resolution(files={"notes.md": "ours"}))
    assert plan.clean and plan.files is not None
    assert dict((p, s) for s, p in plan.files.changes) == {"added.md": "A", "gone.txt": "D", "sub/data.csv": "M"}
    await ws.merge(forked.sid, parent, Resolution(files={"notes.md": "ours"}))
    assert (folder / "sub" / "data.csv").read_text() == "1,2\n3,4\n" and (folder / "added.md").read_text() == "new\n"
    assert not (folder / "gone.txt").exists() and (folder / "notes.md").read_text() == "ours\n"
    assert not copy.exists() and not (tmp_path / "plain.forks").exists()
    assert not any(p.name.startswith(".procession-merge") for p in tmp_path.iterdir())


def test_the_cli_forks_into_a_worktree_and_merges_back(cli, tmp_path):
    repo = Repo.init(tmp_path / "repo", {"notes.md": "base\n"})
    cli("spawn", "review", "--agent", "review", "--cwd", str(repo.path))
    fork = Path(cli.json("fork", "1", "--worktree")["worktree"])
    Repo(fork).commit({"notes.md": "theirs\n"}, "fork")
    repo.commit({"notes.md": "ours\n"}, "parent")
    dry = cli("merge", "2", "1", "--dry-run", check=False)
    assert dry.returncode == 3 and "file notes.md: contents (--ours notes.md or --theirs notes.md)" in dry.stdout
    refused = cli("merge", "2", "1", "--json", check=False)
    assert refused.returncode == 3 and json.loads(refused.stdout)["files"] == {"notes.md": "contents"}
    assert cli.json("merge", "2", "1", "--dry-run", "--theirs", "notes.md")["clean"] is True
    merged = cli("merge", "2", "1", "--theirs", "notes.md")
    assert merged.stdout.startswith("merged 2 into 1") and "1 file changed" in merged.stdout
    assert "its worktree" in merged.stderr and repo.read("notes.md") == "theirs\n"
    both = cli("merge", "2", "1", "--ours", "a", "--theirs", "a", check=False)
    assert both.returncode == 2 and "both --ours and --theirs" in both.stderr


async def test_a_worktree_removed_by_hand_still_merges_what_is_left(ws, tmp_path):
    repo = Repo.init(tmp_path / "repo", {"notes.md": "base\n"})
    parent = await session_in(ws, repo.path)
    child, fork = await fork_with_a_commit(ws, repo, parent, {"kept.md": "on its branch\n"})
    repo.git("worktree", "remove", str(fork.path))  # the folder gone, its branch still there: merged
    merged = await ws.merge(child, parent)
    assert repo.read("kept.md") == "on its branch\n" and merged.files == ("A kept.md",)
    other, fork = await fork_with_a_commit(ws, repo, parent, {"lost.md": "x\n"})
    repo.git("worktree", "remove", str(fork.path))
    repo.git("branch", "-D", "procession/review-3")  # nothing left of it: the memory and messages merge
    merged = await ws.merge(other, parent)
    assert any("own folder and branch are gone" in n.text for n in merged.notes) and merged.files == ()
    assert (await ws.info(other)).worktree is None and await ws.memory_get(parent, "verdict") == "ship it"


async def test_a_commit_trigger_goes_through_a_snapshot_file(ws, tmp_path):
    repo = Repo.init(tmp_path / "repo")
    sid = (await ws.spawn("docs", "docs", cwd=str(repo.path))).sid
    await ws.trigger_add(sid, "commit", branch="*", paths=["docs/**"])
    await ws.save(sid, file=str(tmp_path / "docs.json"))
    loaded = (await ws.load(str(tmp_path / "docs.json"))).sid
    (trig,) = (await ws.info(loaded)).triggers
    assert trig.spec == {"repo": str(repo.path), "branch": "*", "paths": ["docs/**"], "debounce_ms": 100,
                         "git": str(repo.path / ".git")}
    assert not trig.armed and trig.seen == {}  # it looks for the first time once approved and taken in


async def test_a_copys_merge_never_writes_through_a_link_of_the_target(ws, tmp_path):
    """After the fork, the target's folder gains a link to a folder outside it; the fork adds a
    file under that name. Written by name, the merge would land outside: it is refused, and
    nothing outside (nor inside) changed."""
    folder, outside = tmp_path / "plain", tmp_path / "outside"
    folder.mkdir()
    outside.mkdir()
    (folder / "notes.md").write_text("base\n")
    parent = await session_in(ws, folder)
    forked = await ws.fork(parent, worktree=True)
    copy = Path(forked.worktree or "")
    (copy / "docs").mkdir()
    (copy / "docs" / "planted.txt").write_text("gotcha\n")
    (folder / "docs").symlink_to(outside)
    with pytest.raises(ProcessionError, match="docs: a symbolic link where the fork has a folder"):
        await ws.merge(forked.sid, parent)
    assert list(outside.iterdir()) == [] and os.readlink(folder / "docs") == str(outside)
    assert (await ws.info(forked.sid)).state is not State.TERMINATED


async def test_a_copys_merge_never_brings_git_s_own_files_nor_a_link_leading_out(ws, tmp_path):
    """A ``.git`` file from the fork would make the user's folder a worktree of another
    repository, whose ``core.fsmonitor`` git runs at the next ``git status``."""
    folder = tmp_path / "plain"
    folder.mkdir()
    (folder / "notes.md").write_text("base\n")
    evil = tmp_path / "evil"
    Repo.init(evil, {"x": "x\n"})
    pwned = tmp_path / "pwned"
    Repo(evil).git("config", "core.fsmonitor", f"touch {pwned}; false")
    parent = await session_in(ws, folder)
    forked = await ws.fork(parent, worktree=True)
    copy = Path(forked.worktree or "")
    (copy / ".git").write_text(f"gitdir: {evil}/.git\n")
    (copy / "sub").mkdir()
    (copy / "sub" / ".GIT").write_text(f"gitdir: {evil}/.git\n")
    (copy / "result.md").write_text("the fork's work\n")
    tool = copy / "tool.sh"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o4755)
    await ws.merge(forked.sid, parent)
    assert (folder / "result.md").read_text() == "the fork's work\n"
    assert not (folder / ".git").exists() and not (folder / "sub" / ".GIT").exists()
    assert (folder / "tool.sh").stat().st_mode & 0o7777 == 0o755  # no setuid bit brought
    import subprocess

    subprocess.run(["git", "status"], cwd=folder, capture_output=True)
    assert not pwned.exists()

    again = await ws.fork(parent, "second", worktree=True)
    second = Path(again.worktree or "")
    (second / "key").symlink_to(tmp_path / "outside-key")
    with pytest.raises(ProcessionError, match="symbolic links that lead out of"):
        await ws.merge(again.sid, parent)
    assert not (folder / "key").exists() and not (folder / "key").is_symlink()


def tree(folder: Path) -> dict[str, tuple[str, int, bytes | str]]:
    """Everything under ``folder`` as it is, links not followed: each entry's kind, mode, and
    a file's bytes or a link's target."""
    out: dict[str, tuple[str, int, bytes | str]] = {}
    for here, dirs, names in os.walk(folder):
        for name in dirs + names:
            path = Path(here) / name
            mode = path.lstat().st_mode
            rel = str(path.relative_to(folder))
            out[rel] = (("link", 0, os.readlink(path)) if stat.S_ISLNK(mode) else
                        ("file", mode & 0o7777, path.read_bytes()) if stat.S_ISREG(mode) else
                        ("folder" if stat.S_ISDIR(mode) else "other", mode & 0o7777, ""))
    return out


async def test_a_copys_merge_failing_midway_on_a_full_disk_leaves_every_byte_of_the_target_as_it_was(
        ws, small_disk):
    """The fork replaced the target's link out by a folder, a folder by a file, a file by a
    folder, changed a file of a mode of its own and added some; the disk is full as its last
    file comes. All that was done is taken back: the link where a folder was made, the folder
    where a file was put, the modes; the fork stays, and merges once there is room."""
    folder, outside = small_disk / "plain", small_disk / "outside"
    (folder / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "kept.txt").write_text("outside\n")
    (folder / "notes.md").write_text("base\n")
    (folder / "notes.md").chmod(0o600)
    (folder / "sub" / "data.csv").write_text("1,2\n")
    (folder / "sub").chmod(0o750)
    (folder / "plan.txt").write_text("a file\n")
    (folder / "shared").symlink_to("../outside")
    parent = await session_in(ws, folder)
    forked = await ws.fork(parent, worktree=True)
    copy = Path(forked.worktree or "")
    (copy / "shared").unlink()
    (copy / "shared").mkdir()
    (copy / "shared" / "f.txt").write_text("in a folder now\n")
    shutil.rmtree(copy / "sub")
    (copy / "sub").write_text("a file now\n")
    (copy / "plan.txt").unlink()
    (copy / "plan.txt").mkdir()
    (copy / "plan.txt" / "step1.md").write_text("1\n")
    (copy / "notes.md").write_text("theirs\n")
    (copy / "new.txt").write_text("new\n")
    (copy / "zz.bin").write_bytes(os.urandom(1 << 20))
    before, away = tree(folder), tree(outside)
    filler = fill(small_disk, leave=64 * 1024)  # room for the small files, not the last one
    with pytest.raises(ProcessionError, match=r"could not take the fork's files \(zz\.bin: No space left on device\):"
                                              " nothing was merged"):
        await ws.merge(forked.sid, parent)
    assert tree(folder) == before and tree(outside) == away
    assert (await ws.info(forked.sid)).state is not State.TERMINATED and copy.exists()
    assert not [p for p in small_disk.iterdir() if p.name.startswith(".procession-merge")]
    filler.unlink()
    await ws.merge(forked.sid, parent)
    assert (folder / "shared" / "f.txt").read_text() == "in a folder now\n" and not (folder / "shared").is_symlink()
    assert (folder / "sub").read_text() == "a file now\n" and (folder / "plan.txt" / "step1.md").read_text() == "1\n"
    assert (folder / "notes.md").read_text() == "theirs\n" and (folder / "zz.bin").stat().st_size == 1 << 20
    assert tree(outside) == away and not copy.exists()


async def test_a_copys_merge_the_target_cannot_take_whole_is_refused_before_anything_changes(ws, tmp_path):
    """Since the fork, the target's folder gained a file where the fork made a folder, a file
    in a folder the fork replaced by a file, and a FIFO where the fork added a file: the
    merge (and its dry run) refuses, naming each, and no byte of the target changed."""
    folder = tmp_path / "plain"
    (folder / "docs").mkdir(parents=True)
    (folder / "docs" / "a.md").write_text("a\n")
    parent = await session_in(ws, folder)
    forked = await ws.fork(parent, worktree=True)
    copy = Path(forked.worktree or "")
    (copy / "d").mkdir()
    (copy / "d" / "x.txt").write_text("x\n")
    shutil.rmtree(copy / "docs")
    (copy / "docs").write_text("one file now\n")
    (copy / "pipe").write_text("a file\n")
    (copy / "result.md").write_text("the fork's work\n")
    (folder / "d").write_text("the target's own\n")
    (folder / "docs" / "b.md").write_text("b\n")
    os.mkfifo(folder / "pipe")
    before = tree(folder)
    said = (r"d: a file where the fork has a folder; docs: a folder holding docs/b\.md where the fork has a file;"
            r" pipe: a FIFO, which a merge never replaces\): nothing was merged")
    with pytest.raises(ProcessionError, match=said):
        await ws.merge_plan(forked.sid, parent)
    with pytest.raises(ProcessionError, match=said):
        await ws.merge(forked.sid, parent)
    assert tree(folder) == before and (await ws.info(forked.sid)).state is not State.TERMINATED


async def test_a_copy_takes_databases_as_sqlite_committed_them_and_never_the_workspaces_own(tmp_path):
    """A project outside git holding the live workspace (``workspace.db`` with its WAL) and a
    database its app writes: the fork's copy leaves the workspace's out, takes the app's as
    one consistent snapshot (what was committed; a transaction in flight is not in it), and
    no database's side files come along, nor are they ever merged back."""
    import sqlite3

    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "notes.md").write_text("base\n")
    app = sqlite3.connect(folder / "app.db")
    app.execute("PRAGMA journal_mode=WAL")
    app.execute("CREATE TABLE t (n)")
    app.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(100)])
    app.commit()
    app.execute("INSERT INTO t VALUES (-1)")  # in flight when the fork is made
    assert (folder / "app.db-wal").exists()
    ws = await Workspace.open(folder / "workspace.db")
    try:
        parent = await session_in(ws, folder)
        forked = await ws.fork(parent, worktree=True)
        copy = Path(forked.worktree or "")
        assert sorted(p.name for p in copy.iterdir()) == ["app.db", "notes.md"]
        mine = sqlite3.connect(copy / "app.db")
        assert mine.execute("SELECT count(*), min(n) FROM t").fetchone() == (100, 0)
        mine.execute("PRAGMA journal_mode=WAL")
        with mine:
            mine.execute("INSERT INTO t VALUES (100)")  # the fork works on its copy: side files appear
        assert (copy / "app.db-wal").exists()
        mine.execute("PRAGMA wal_checkpoint")
        said = [n.text for n in forked.notes]
        assert "1 SQLite database copied as SQLite committed it (a consistent snapshot, without side files): app.db" in said
        assert ("left out of the copy: workspace.db (this workspace's own database and what is not a regular"
                " file, a FIFO or a device, are never copied)") in said
        plan = await ws.merge_plan(forked.sid, parent)
        # the parent's database is live (its file is not what the copy began as): a conflict to
        # settle, never a live database overwritten unasked; no side file is ever a change
        assert plan.files is not None and plan.files.changes == () and list(plan.files.conflicts) == ["app.db"]
        mine.close()
    finally:
        app.rollback()
        app.close()
        await ws.close()


async def test_a_fifo_in_the_folder_is_left_out_of_a_copy_and_never_blocks_it(ws, tmp_path):
    """A FIFO (a hostile or a tool's) in a folder forked outside git: opening it to copy, or to
    see whether it is a database, would block the fork for ever; it is left out, and said."""
    folder = tmp_path / "plain"
    folder.mkdir()
    (folder / "notes.md").write_text("base\n")
    os.mkfifo(folder / "pipe")
    os.mkfifo(folder / "trap.db")
    os.symlink("pipe", folder / "link.db")  # a link is copied as a link, never opened
    parent = await session_in(ws, folder)
    forked = await asyncio.wait_for(ws.fork(parent, worktree=True), 60)
    copy = Path(forked.worktree or "")
    assert sorted(p.name for p in copy.iterdir()) == ["link.db", "notes.md"]
    assert any(n.text.startswith("left out of the copy: pipe, trap.db") for n in forked.notes)


async def test_what_a_step_left_in_the_repositorys_git_folder_never_runs_outside_its_bounds(ws, tmp_path):
    """A session's step may write its repository's ``.git`` (it is in its folder): a hook, a
    file system monitor, a filter or a diff driver named in its configuration (and picked by
    attributes, its own or in ``info/``). Procession's own git (the fork's worktree, the status
    it reads, the diff it carries, the merge's commit, the branch's removal) runs none of them."""
    repo = Repo.init(tmp_path / "repo", {"a.txt": "one\n"})
    ran = tmp_path / "ran"
    plant = f"#!/bin/sh\necho \"$0\" >> {ran}\n"
    for hook in ("post-checkout", "pre-commit", "commit-msg", "post-commit", "post-merge", "reference-transaction"):
        (repo.path / ".git" / "hooks" / hook).write_text(plant)
        (repo.path / ".git" / "hooks" / hook).chmod(0o755)
    (tmp_path / "program.sh").write_text(plant)
    (tmp_path / "program.sh").chmod(0o755)
    planted = {"core.fsmonitor": "false", "core.hooksPath": "/dev/null", "filter.x=y.clean": "",
               "filter.x=y.smudge": "", "diff.x.textconv": "", "diff.external": ""}  # a name with =, too
    for key in planted:
        repo.git("config", key, str(tmp_path / "program.sh"))
    clear = {"GIT_CONFIG_COUNT": str(len(planted))}  # for the test's own git: it runs none of it either
    for n, (key, value) in enumerate(planted.items()):
        clear[f"GIT_CONFIG_KEY_{n}"], clear[f"GIT_CONFIG_VALUE_{n}"] = key, value

    def plainly(folder: Path, message: str) -> None:
        for args in (["add", "-A"], ["commit", "-qm", message]):
            subprocess.run(["git", *args], cwd=folder, check=True, env={**quiet_env(), **clear})

    (repo.path / ".gitattributes").write_text("*.txt filter=x=y diff=x\n")
    plainly(repo.path, "attributes")
    (repo.path / ".git" / "info" / "attributes").write_text("*.txt filter=x=y\n")
    parent = await session_in(ws, repo.path)
    (repo.path / "a.txt").write_text("one, not committed\n")
    forked = await ws.fork(parent, worktree=True, carry=True)  # status, worktree add, the carried diff
    assert not ran.exists()
    fork = Path(forked.worktree or "")
    assert (fork / "a.txt").read_text() == "one, not committed\n"
    (fork / "a.txt").write_text("two\n")
    plainly(fork, "the fork's")
    (repo.path / "a.txt").write_text("one\n")
    await ws.merge(forked.sid, parent)
    assert repo.read("a.txt") == "two\n" and not ran.exists()
