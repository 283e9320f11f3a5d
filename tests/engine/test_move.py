"""``move``: a session to another host and back, with its folder and its agent's own session,
carried by the two hosts' engines through the store.

The hosts are engine processes on this machine, each named by ``--host``, each host's folders
in a folder of its own (one machine stands for several, as the issue's tests must). The
multi-host moves run on the tests' real PostgreSQL server; the refusals and failures, which
need no second machine's view, on an SQLite file shared by two engines, as hosts work there
too.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from conftest import HANG_S, sql, until
from procession import NotFound, State, Workspace
from procession.engine import branches, packing
from support.agent_clis import ClaudeSandbox, session_env
from support.git import Repo, git_identity  # noqa: F401 - a fixture
from support.hosts import spawn_on, start_engine, stop
from support.models import ModelServer, say
from support.runs import finished

SHOW = "command:sh -c 'pwd; cat a.txt'"


def make_folder(folder: Path, *, fifo: bool = False) -> dict[str, bytes | str]:
    """A session's folder as a user leaves it, with what a model may have put there: a file
    with every byte, a link inside, a link out to a secret (and a FIFO). What it holds, as ``held``."""
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text("hello\n")
    (folder / "sub" / "bytes.bin").write_bytes(bytes(range(256)) * 4)
    (folder / "sub" / "bytes.bin").chmod(0o640)
    (folder / "link").symlink_to("a.txt")
    (folder / "secret").symlink_to("/etc/shadow")
    if fifo:
        os.mkfifo(folder / "pipe")
    return held(folder)


def held(folder: Path) -> dict[str, bytes | str]:
    """Every file's bytes and mode, every link's target, under ``folder`` (FIFOs named)."""
    out: dict[str, bytes | str] = {}
    for path in sorted(folder.rglob("*")):
        rel = str(path.relative_to(folder))
        if path.is_symlink():
            out[rel] = f"-> {os.readlink(path)}"
        elif path.is_fifo():
            out[rel] = "fifo"
        elif path.is_file():
            out[rel] = path.read_bytes() + oct(path.stat().st_mode & 0o777).encode()
    return out


def cli(db: str, *args: str, home: str | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI on ``db``; ``home``: the HOME it runs with (by default the tests' own, wherever it is)."""
    env = {**os.environ, "HOME": home} if home is not None else None
    return subprocess.run([sys.executable, "-m", "procession", "--db", db, *args], capture_output=True, text=True,
                          env=env, timeout=HANG_S)


async def run_once(ws: Workspace, sid: int, n: int) -> str:
    """Activate ``sid`` and wait for its run ``n``: the host whose engine ran it."""
    await ws.activate(sid)
    run = await until(lambda: finished(ws, sid, n))
    assert run.outcome == "ok", run.error
    [(host,)] = sql(str(ws.path), "SELECT e.host FROM runs r JOIN engines e ON e.token = r.engine WHERE r.id = ?",
                    (run.id,))
    return str(host)


async def test_a_session_moves_to_another_host_with_its_folder_and_paths_and_comes_back(postgres, tmp_path) -> None:
    url = postgres.workspace()
    here, there = tmp_path / "alpha" / "proj", tmp_path / "beta" / "proj"
    before = make_folder(here)
    ws = await Workspace.open(url)
    engines = {host: start_engine(url, host) for host in ("alpha", "beta")}
    try:
        sid = await spawn_on(ws, "alpha", "mover", SHOW, cwd=str(here))
        await ws.bind(sid, "file", str(here / "a.txt"))
        await ws.trigger_add(sid, "watch", [str(here / "sub")])
        assert await run_once(ws, sid, 1) == "alpha"

        out = cli(url, "move", str(sid), "--to", "beta", "--map", f"{here}={there}")
        assert out.returncode == 0, out.stderr
        assert f"session {sid} moved from host alpha to host beta; it works in {there} there" in out.stdout
        info = await ws.info(sid)
        assert (info.host, info.cwd) == ("beta", str(there))
        assert not here.exists()  # the old folder went, as nothing in it changed
        assert held(there) == before
        assert os.readlink(there / "secret") == "/etc/shadow"  # carried as a link, never read through
        detail = await ws.show(sid)
        assert [r.uri for r in detail.resources] == [str(there / "a.txt")]
        assert [t.spec["paths"] for t in info.triggers] == [[str(there / "sub")]]
        assert detail.move is not None and detail.move.stage == "done"
        shown = cli(url, "show", str(sid)).stdout
        assert f"{there}  on host beta" in shown and re.search(r"moved +from host alpha to host beta", shown)
        assert await run_once(ws, sid, 2) == "beta"

        out = cli(url, "move", str(sid), "--to", "alpha", "--map", f"{there}={here}")
        assert out.returncode == 0, out.stderr
        assert not there.exists() and held(here) == before
        assert await run_once(ws, sid, 3) == "alpha"
        said = [m.content for m in await ws.history(sid)]
        assert said == [f"{here}\nhello", f"{there}\nhello", f"{here}\nhello"]  # one history, all along
        moves = [(e.actor, e.outcome["stage"]) for e in await ws.journal(sid) if e.call == "move"]
        assert moves == [("cli", "packing"), ("engine", "placing"), ("engine", "clearing"), ("engine", "done")] * 2
    finally:
        for engine in engines.values():
            stop(engine)
        await ws.close()


@pytest.fixture
async def two_hosts(tmp_path):
    """An SQLite workspace with an engine for host alpha and one for host beta."""
    db = str(tmp_path / "ws.db")
    ws = await Workspace.open(db)
    engines = {host: start_engine(db, host) for host in ("alpha", "beta")}
    await until(lambda: len(_engines(db)) == 2)
    try:
        yield db, ws, engines
    finally:
        for engine in engines.values():
            if engine.poll() is None:
                stop(engine)
        await ws.close()


def _engines(db: str) -> list[str]:
    return [r[0] for r in sql(db, "SELECT host FROM engines")]


async def test_a_running_session_is_refused_in_one_line_and_a_full_target_fails_the_move_whole(
        two_hosts, tmp_path) -> None:
    db, ws, _ = two_hosts
    here, there = tmp_path / "a", tmp_path / "b"
    sleeper = await spawn_on(ws, "alpha", "sleeper", "command:sleep 60", cwd=str(tmp_path))
    await ws.activate(sleeper)
    await until(lambda: _state(ws, sleeper, State.RUNNING))
    out = cli(db, "move", str(sleeper), "--to", "beta")
    assert out.returncode == 1 and out.stderr.count("\n") == 1, out.stderr
    assert "cannot move session" in out.stderr and "it is running" in out.stderr
    await ws.cancel(sleeper)

    before = make_folder(here)
    there.mkdir()
    (there / "mine.txt").write_text("the user's own\n")
    sid = await spawn_on(ws, "alpha", "mover", SHOW, cwd=str(here))
    out = cli(db, "move", str(sid), "--to", "beta", "--map", f"{here}={there}")
    assert out.returncode == 1 and not out.stdout  # a failure, said on standard error, each host's part beneath
    assert out.stderr.startswith(f"procession: error: session {sid} did not move to host beta, and stays on host"
                                 f" alpha: {there} is there already and holds files; nothing was written there"), out.stderr
    assert out.stderr.endswith("\n  host alpha packed 2 files (1,030 bytes)\n"), out.stderr
    assert held(here) == before and held(there) == {"mine.txt": b"the user's own\n0o644"}  # nothing touched
    assert (await ws.info(sid)).host == "alpha"
    await run_once(ws, sid, 1)  # it runs where it is

    other = await spawn_on(ws, "alpha", "neighbour", SHOW, cwd=str(here / "sub"))
    out = cli(db, "move", str(sid), "--to", "beta", "--map", f"{here}={tmp_path / 'c'}")
    assert out.returncode == 1 and f"session {other} works in {here / 'sub'} too" in out.stderr
    assert held(here) == before


async def test_a_move_into_its_own_subfolder_seen_from_one_file_system_keeps_the_old_folder_and_says_why(
        two_hosts, tmp_path) -> None:
    """One machine standing for two hosts: the new folder shows inside the old one, which is
    therefore not what was packed; it is kept, and said to be for that, not for a change."""
    db, ws, _ = two_hosts
    here = tmp_path / "a"
    before = make_folder(here)
    sid = await spawn_on(ws, "alpha", "mover", SHOW, cwd=str(here))
    out = cli(db, "move", str(sid), "--to", "beta", "--map", f"{here}={here / 'moved'}")
    assert out.returncode == 0, out.stderr
    assert f"its old folder {here} is kept: the session's new folder {here / 'moved'} is inside it, and shows here" \
        " (the two hosts share this file system); remove the rest of it yourself" in out.stdout, out.stdout
    assert held(here / "moved") == before
    assert {k: v for k, v in held(here).items() if k.split("/")[0] != "moved"} == before
    assert await run_once(ws, sid, 1) == "beta"


async def test_a_move_not_placed_yet_is_taken_back_and_nothing_is_made_on_the_other_host(two_hosts, tmp_path) -> None:
    db, ws, engines = two_hosts
    await spawn_on(ws, "beta", "resident", SHOW, cwd=str(tmp_path))  # a host the workspace knows
    stop(engines["beta"])
    here, there = tmp_path / "a", tmp_path / "b"
    before = make_folder(here)
    sid = await spawn_on(ws, "alpha", "mover", SHOW, cwd=str(here))
    asked_for = await ws.move(sid, "beta", mapping={str(here): str(there)})
    [note] = asked_for.notes
    assert note.text.startswith("no engine runs for host beta now: the move waits for one (procession --host beta run)")
    assert asked_for.waiting == ("beta",) and f"or is taken back (move {sid} --to alpha)" in note.text
    with pytest.raises(NotFound, match="no host betta has an engine or a session in this workspace: start its engine"):
        await ws.move(await spawn_on(ws, "alpha", "typo", SHOW, cwd=str(tmp_path)), "betta")  # mistyped: refused
    await until(lambda: _stage(ws, sid, "placing"))  # alpha packed it; beta is not there to place it
    asked = await ws.activate(sid)  # asked meanwhile: it waits for the move, runs nowhere
    assert "it is moving to host beta: the run waits" in asked.notes[0].text
    back = await ws.move(sid, "alpha")
    assert back.cancelled and (await ws.move_info(sid)).stage == "cancelled"  # type: ignore[union-attr]
    engines["beta"] = start_engine(db, "beta")
    await until(lambda: "beta" in _engines(db))  # up: it would place what it was given
    run = await until(lambda: finished(ws, sid, 1))  # the run asked meanwhile, on its own host
    assert run.outcome == "ok" and [m.content for m in await ws.history(sid)] == [f"{here}\nhello"]
    assert not there.exists() and held(here) == before and (await ws.info(sid)).host == "alpha"


async def test_a_forks_worktree_moves_into_a_clone_on_the_other_host_with_its_branch_and_back(
        git_identity, two_hosts, tmp_path, monkeypatch) -> None:
    db, ws, _ = two_hosts
    alpha, beta = tmp_path / "alpha", tmp_path / "beta"
    repo = Repo.init(alpha / "proj", {"a.txt": "one\n", "gone.txt": "bye\n"})
    subprocess.run(["git", "clone", "-q", str(repo.path), str(beta / "proj")], check=True, capture_output=True)
    parent = await spawn_on(ws, "alpha", "parent", "command:true", cwd=str(repo.path))
    monkeypatch.setenv("PROCESSION_HOST", "alpha")
    fork = (await ws.fork(parent, "side", worktree=True)).sid
    tree = Repo(Path((await ws.info(fork)).cwd))
    branch = tree.git("branch", "--show-current")
    tip = tree.commit({"a.txt": "two\n"}, "on the fork's branch")  # a commit the clone on beta never saw
    tree.write({"a.txt": "three\n", "new.txt": "not added\n"})  # and work not committed
    (tree.path / "gone.txt").unlink()
    status, files = tree.git("status", "--short"), held(tree.path)

    out = cli(db, "move", str(parent), "--to", "beta", "--map", f"{alpha}={beta}")
    assert out.returncode == 1 and f"session {fork} works in {tree.path}, a worktree of the repository" in out.stderr

    out = cli(db, "move", str(fork), "--to", "beta", "--map", f"{repo.path}={beta / 'proj'}")  # the fork follows
    assert out.returncode == 0, out.stderr
    assert f"its branch {branch} goes with it, into the repository {beta / 'proj' / '.git'} on host beta" in out.stderr
    there = Repo(beta / "proj.forks" / tree.path.name)
    assert (await ws.info(fork)).cwd == str(there.path)
    assert there.head() == tip and there.git("branch", "--show-current") == branch
    assert there.git("status", "--short") == status and held(there.path) == {**files, ".git": held(there.path)[".git"]}
    assert Path(there.git("rev-parse", "--git-common-dir")).resolve() == (beta / "proj" / ".git").resolve()
    worktree = (await ws.info(fork)).worktree
    assert worktree is not None and worktree.source == str(beta / "proj")  # of the clone here, as show says
    assert worktree.moves_with == str(beta / "proj")  # what the monitor's move form offers to --map
    assert not tree.path.exists() and branch not in repo.git("branch", "--list")  # gone from alpha, as unchanged
    assert not tree.path.parent.exists()  # and the forks' folder beside the repository, empty now
    assert str(tree.path) not in repo.git("worktree", "list")

    with pytest.raises(Exception, match=f"session {fork}'s own folder is on host beta and session {parent}'s folder on"
                                        " host alpha: merging files needs both on one host"):
        await ws.merge(fork, parent)
    monkeypatch.setenv("PROCESSION_HOST", "beta")
    with pytest.raises(Exception, match=f"session {parent}'s folder is on host alpha, and this is host beta: make the"
                                        " call there"):
        await ws.fork(parent, "elsewhere", worktree=True)

    out = cli(db, "move", str(fork), "--to", "alpha", "--map", f"{beta}={alpha}")
    assert out.returncode == 0, out.stderr
    assert tree.head() == tip and tree.git("status", "--short") == status
    assert not there.path.exists() and branch not in Repo(beta / "proj").git("branch", "--list")
    monkeypatch.setenv("PROCESSION_HOST", "alpha")
    tree.commit({}, "the rest")
    await ws.merge(fork, parent)
    assert repo.read("a.txt") == "three\n" and repo.read("new.txt") == "not added\n"
    assert not (repo.path / "gone.txt").exists()


async def test_a_worktree_with_no_clone_or_a_rival_branch_there_fails_its_move_and_nothing_is_left(
        git_identity, two_hosts, tmp_path, monkeypatch) -> None:
    db, ws, _ = two_hosts
    alpha, beta = tmp_path / "alpha", tmp_path / "beta"
    repo = Repo.init(alpha / "proj")
    parent = await spawn_on(ws, "alpha", "parent", "command:true", cwd=str(repo.path))
    monkeypatch.setenv("PROCESSION_HOST", "alpha")
    fork = (await ws.fork(parent, "side", worktree=True)).sid
    tree = Repo(Path((await ws.info(fork)).cwd))
    tree.write({"work.txt": "mine\n"})
    before, branch = held(tree.path), tree.git("branch", "--show-current")

    out = cli(db, "move", str(fork), "--to", "beta", "--map", f"{alpha}={beta}")  # no clone on beta
    assert out.returncode == 1 and f"there is no git repository at {beta / 'proj' / '.git'} on this host: clone the" \
        " repository there" in out.stderr, out.stderr
    assert not (beta / "proj.forks").exists()

    clone = Repo(beta / "proj")
    subprocess.run(["git", "clone", "-q", str(repo.path), str(clone.path)], check=True, capture_output=True)
    clone.git("switch", "-q", "-c", branch)
    clone.commit({"theirs.txt": "x\n"}, "another line of work, under the same name")
    clone.git("switch", "-q", "main")
    rival = clone.head(branch)
    out = cli(db, "move", str(fork), "--to", "beta", "--map", f"{alpha}={beta}")
    assert out.returncode == 1 and f"has a branch {branch} already, at another commit ({rival[:12]})" in out.stderr
    assert clone.head(branch) == rival and not (beta / "proj.forks").exists()
    info = await ws.info(fork)
    assert (info.host, info.cwd) == ("alpha", str(tree.path)) and held(tree.path) == before  # as it was
    assert tree.git("branch", "--show-current") == branch


async def test_a_forks_copy_outside_git_moves_and_comes_back_to_be_merged(two_hosts, tmp_path, monkeypatch) -> None:
    db, ws, _ = two_hosts
    alpha, beta = tmp_path / "alpha", tmp_path / "beta"
    (alpha / "notes").mkdir(parents=True)
    (alpha / "notes" / "plan.txt").write_text("one\n")
    parent = await spawn_on(ws, "alpha", "parent", "command:true", cwd=str(alpha / "notes"))
    monkeypatch.setenv("PROCESSION_HOST", "alpha")
    fork = (await ws.fork(parent, "side", worktree=True)).sid
    copy = Path((await ws.info(fork)).cwd)
    (copy / "plan.txt").write_text("two\n")

    out = cli(db, "move", str(fork), "--to", "beta", "--map", f"{alpha}={beta}")
    assert out.returncode == 0, out.stderr
    info = await ws.info(fork)
    moved = beta / copy.relative_to(alpha)
    assert (info.host, info.cwd) == ("beta", str(moved)) and info.worktree is not None
    assert info.worktree.path == str(moved) and (moved / "plan.txt").read_text() == "two\n" and not copy.exists()
    assert cli(db, "move", str(fork), "--to", "alpha", "--map", f"{beta}={alpha}").returncode == 0
    await ws.merge(fork, parent)  # the copy's manifest, its base, held by relative paths: it merges as made
    assert (alpha / "notes" / "plan.txt").read_text() == "two\n"


def test_only_a_forks_branch_is_fetched_from_a_bundle(git_identity, tmp_path) -> None:
    repo = Repo.init(tmp_path / "proj")
    data, tip = branches.bundle(str(repo.path / ".git"), "main", 2**20)
    with pytest.raises(packing.MoveFailed, match="'main' is not a fork's branch: the move carries none other"):
        branches.place(data, b"", str(repo.path / ".git"), "main", tip, str(tmp_path / "there"))
    with pytest.raises(packing.MoveFailed, match="could not be made"):
        branches.place(b"not a bundle", b"", str(repo.path / ".git"), "procession/x", tip, str(tmp_path / "there"))
    assert repo.git("branch", "--list") == "* main" and not (tmp_path / "there").exists()
    repo.git("branch", "procession/x")
    data, tip = branches.bundle(str(repo.path / ".git"), "procession/x", 2**20)
    repo.git("branch", "-D", "procession/x")
    crafted = tmp_path / "crafted"
    crafted.mkdir()
    (crafted / ".git").write_text("gitdir: /somewhere/else\n")  # a pack that brings a .git of its own
    with pytest.raises(packing.MoveFailed, match="the carried files hold a .git of their own: nothing was kept"):
        branches.place(data, packing.pack(str(crafted)).data, str(repo.path / ".git"), "procession/x", tip,
                       str(tmp_path / "there"))
    assert repo.git("branch", "--list") == "* main" and not (tmp_path / "there").exists()  # the branch it made went
    assert "there" not in repo.git("worktree", "list")


async def test_a_mistyped_host_is_said_at_spawn_a_cancelled_session_stops_moving_and_tmp_is_never_carried_off(
        two_hosts, tmp_path) -> None:
    db, ws, engines = two_hosts
    await spawn_on(ws, "beta", "resident", SHOW, cwd=str(tmp_path))  # a host the workspace knows
    stop(engines["beta"])
    os.environ["PROCESSION_HOST"] = "alhpa"
    try:
        made = await ws.spawn("typo", "fleet", runner=SHOW, cwd=str(tmp_path))
    finally:
        del os.environ["PROCESSION_HOST"]
    assert [n.text for n in made.notes] == ["host alhpa is new to this workspace (its hosts: alpha, beta): the session"
                                            " runs once an engine runs for host alhpa (procession --host alhpa run)"]
    here = tmp_path / "a"
    make_folder(here)
    sid = await spawn_on(ws, "alpha", "mover", SHOW, cwd=str(here))
    out = cli(db, "move", str(sid), "--to", "beta", "--map", f"{here}={tmp_path / 'b'}")
    assert out.returncode == 124 and "no engine runs for host beta now: the move waits for one" in out.stderr  # not moved
    assert (await ws.info(sid)).moving == "beta"
    cancelled = await ws.cancel(sid)
    assert [n.text for n in cancelled.notes] == ["its move to host beta is taken back: it stays on host alpha"]
    assert (await ws.info(sid)).moving is None and (await ws.move_info(sid)).stage == "cancelled"  # type: ignore[union-attr]

    around = await spawn_on(ws, "alpha", "around", SHOW, cwd=str(tmp_path))
    (tmp_path / "c").mkdir()
    inner = await spawn_on(ws, "alpha", "inner", SHOW, cwd=str(tmp_path / "c"))
    out = cli(db, "move", str(inner), "--to", "beta", "--map", f"{tmp_path / 'c'}={tmp_path / 'd'}")
    assert out.returncode == 124, out.stderr  # accepted, waiting for beta's engine
    assert f"session {around} works in {tmp_path}, around the folder that goes: it stays, without it" in out.stderr
    await ws.move(inner, "alpha")  # taken back

    shared = await spawn_on(ws, "alpha", "in tmp", SHOW, cwd="/tmp")
    # with a home outside /tmp; a throwaway home (a new user's) is under it, and /tmp is refused for holding it
    out = cli(db, "move", str(shared), "--to", "beta", "--map", "/tmp=/srv/tmp", home="/nonexistent")
    assert out.returncode == 1 and out.stderr.count("\n") == 1, out.stderr
    assert f"session {shared}'s folder /tmp cannot be carried off (it is a folder of the whole system)" in out.stderr
    out = cli(db, "move", str(shared), "--to", "beta", "--map", "/tmp=/srv/tmp", home=str(tmp_path))
    assert f"session {shared}'s folder /tmp cannot be carried off (it holds your home folder {tmp_path})" \
        in out.stderr, out.stderr
    assert await ws.move_info(shared) is None


async def _state(ws: Workspace, sid: int, state: State) -> bool:
    return (await ws.info(sid)).state is state


async def _stage(ws: Workspace, sid: int, stage: str) -> bool:
    found = await ws.move_info(sid)
    return found is not None and found.stage == stage


async def test_a_claude_code_session_moves_to_another_home_and_back_and_resumes_its_own_session(
        postgres, model_server: ModelServer, tmp_path, monkeypatch) -> None:
    """Each host has a HOME of its own: the transcript goes with the session, into the other
    host's Claude Code folder for the new folder, and comes back grown."""
    url = postgres.workspace()
    sandbox = ClaudeSandbox(_claude(), model_server, tmp_path / "alpha")
    elsewhere = tmp_path / "beta"
    (elsewhere / "home").mkdir(parents=True)
    machine: dict[str, str] = {}
    settings, passed = session_env([sandbox], machine.__setitem__, machine=True)
    env = {host: {**os.environ, **machine, **({"HOME": str(elsewhere / "home")} if host == "beta" else {})}
           for host in ("alpha", "beta")}
    ws = await Workspace.open(url)
    engines = {host: start_engine(url, host, env=env[host]) for host in ("alpha", "beta")}
    try:
        sid = await spawn_on(ws, "alpha", "coder", "claude:", cwd=str(sandbox.workdir), env=settings, passed=passed)
        prompts = ["remember the word kiwi", "which word?", "and now?"]
        for n, (host, prompt) in enumerate(zip(("alpha", "beta", "alpha"), prompts), start=1):
            if n > 1:
                source, target = (sandbox.workdir, elsewhere / "work") if host == "beta" else (
                    elsewhere / "work", sandbox.workdir)
                await ws.move(sid, host, mapping={str(source): str(target)})
                moved = await ws.moved(sid, HANG_S)
                assert moved.stage == "done", moved
            model_server.script.add(say(f"answer {n}"))
            await ws.send(sid, prompt)
            assert await run_once(ws, sid, n) == host
            ref = (await ws.show(sid)).agent_ref
            assert ref is not None and Path(ref["transcript"]).is_file()
            assert str(env[host]["HOME"]) in ref["transcript"]  # under this host's own Claude Code folder
            if n == 1:
                first = ref["id"]
            assert ref["id"] == first  # the same session of Claude Code's, resumed on each host
            asked = model_server.turn_requests()[-1].texts("user")
            assert all(any(p in t for t in asked) for p in prompts[:n]), asked  # it remembers what came before
        assert [m.content for m in await ws.history(sid) if m.role == "assistant"] == ["answer 1", "answer 2",
                                                                                       "answer 3"]
        lines = Path(ref["transcript"]).read_text().splitlines()
        assert sum('"answer 3"' in line for line in lines) == 1 and sum('"answer 1"' in line for line in lines) == 1
        assert not (elsewhere / "work").exists()
        # every record names the folder it is in now, those written on the other host too
        assert {json.loads(line).get("cwd") for line in lines} - {None} == {str(sandbox.workdir)}
    finally:
        for engine in engines.values():
            stop(engine)
        await ws.close()


def _claude():
    from support.agent_clis import require_cli

    return require_cli("claude")


def _tar(*members: tuple[tarfile.TarInfo, bytes | None]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "", mode: int = 0o644) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, link, mode
    return info


@pytest.mark.parametrize("members", [
    [(_member("out", tarfile.SYMTYPE, "/"), None), (_member("out/escaped"), b"x")],  # a file written through a link
    [(_member("../escaped"), b"x")],  # a member above the folder
    [(_member("/escaped"), b"x"), (_member("sub/../../escaped"), b"x")],
], ids=["through-a-link", "dot-dot", "absolute"])
def test_a_crafted_pack_writes_nothing_outside_the_folder_it_makes(tmp_path, members) -> None:
    """What a move unpacks came through the store, where anyone who may write could have put
    it: no member lands outside the new folder, and a refused pack leaves no folder at all."""
    target = tmp_path / "deep" / "target"
    try:
        packing.unpack(_tar(*members), str(target))
    except packing.MoveFailed as exc:
        assert str(target) in str(exc)
        assert not target.exists()
    else:  # an absolute name is taken as relative, inside the folder (as tar itself does)
        assert {str(p.relative_to(target)) for p in target.rglob("*")} <= {"escaped", "sub"}
    assert not (tmp_path / "deep" / "escaped").exists() and not Path("/escaped").exists()
    assert [p.name for p in (tmp_path / "deep").iterdir()] in ([], ["target"])  # no half-made folder left


@pytest.mark.parametrize(("members", "named"), [
    ([(_member("bashrc", tarfile.LNKTYPE, "{outside}"), None)], "'bashrc', a hard link"),
    ([(_member("sub", tarfile.DIRTYPE), None), (_member("sub/bashrc", tarfile.LNKTYPE, "../../../bashrc"), None)],
     "'sub/bashrc', a hard link"),
    ([(_member("null", tarfile.CHRTYPE), None)], "'null', a device"),
    ([(_member("disk", tarfile.BLKTYPE), None)], "'disk', a device"),
    ([(_member("pipe", tarfile.FIFOTYPE), None)], "'pipe', a FIFO"),
    ([(_member("sub", tarfile.DIRTYPE), None), (_member("in", tarfile.SYMTYPE, "sub"), None),
      (_member("in/bashrc"), b"x")], "'in/bashrc', named through the symbolic link 'in'"),
    ([(_member("a.txt"), b"one"), (_member("a.txt"), b"two")], "'a.txt' twice"),
    ([(_member("a.txt", tarfile.SYMTYPE, "{outside}"), None), (_member("a.txt"), b"two")], "'a.txt' twice"),
    ([(_member("deep/a.txt"), b"x")], "'deep/a.txt' before its folder"),
    ([(_member("a.txt"), b"x"), (_member("a.txt/b"), b"x")], "'a.txt/b' before its folder"),
    ([(_member("sub/../a.txt"), b"x")], "'sub/../a.txt', a name with '..'"),
    ([(_member("/etc/bashrc"), b"x")], "'/etc/bashrc', an absolute name"),
], ids=["hard-link-absolute", "hard-link-relative", "char-device", "block-device", "fifo", "through-a-link-inside",
        "twice", "link-then-file", "no-folder", "file-as-folder", "dot-dot-inside", "absolute"])
def test_a_pack_holding_anything_but_files_folders_and_links_is_refused_whole(tmp_path, members, named) -> None:
    """A pack from a rogue host: a hard link to the user's ``~/.bashrc`` (here a file beside
    the target) would put that very file in the session's folder, for its next step to write;
    a device or a FIFO is no file. Each is refused by name, nothing is made, and the file
    outside is neither changed nor linked."""
    outside = tmp_path / "bashrc"
    outside.write_text("export PATH=/usr/bin\n")
    target = tmp_path / "deep" / "target"
    crafted = [(_member(i.name, i.type, i.linkname.format(outside=outside)), data) for i, data in members]
    with pytest.raises(packing.MoveFailed, match=re.escape(named)) as refused:
        packing.unpack(_tar(*crafted), str(target))
    assert str(target) in str(refused.value) and "\n" not in str(refused.value)
    assert not target.exists() and os.listdir(tmp_path / "deep") == []  # nothing half made
    assert outside.read_text() == "export PATH=/usr/bin\n" and outside.stat().st_nlink == 1


def test_a_pack_larger_than_a_move_carries_is_refused_before_its_bytes_are_written(tmp_path) -> None:
    """What a pack says its files hold is counted before they are written: a pack from another
    host cannot fill this one's disk beyond what a move carries."""
    crafted = _tar((_member("one"), b"x" * 3000), (_member("two"), b"x" * 3000))
    with pytest.raises(packing.MoveFailed, match="more than a move carries"):
        packing.unpacked(crafted, str(tmp_path / "target"), limit=5000)
    assert os.listdir(tmp_path) == []


def test_a_pack_of_more_entries_or_header_bytes_than_a_move_carries_is_refused(tmp_path, monkeypatch) -> None:
    """A gzip of empty entries, or of one endless name, is small: neither is read past what a
    move carries (here, three entries), on either host."""
    monkeypatch.setattr(packing, "ENTRIES_MAX", 3)
    many = _tar(*[(_member(f"f{i}"), b"") for i in range(4)])
    with pytest.raises(packing.MoveFailed, match="more than 3 files, folders and links"):
        packing.unpacked(many, str(tmp_path / "target"))
    endless = _tar((_member("x" * 3 * 2**20), b""))
    with pytest.raises(packing.MoveFailed, match="more than a move carries, unpacked"):
        packing.unpacked(endless, str(tmp_path / "target"), limit=5000)
    assert os.listdir(tmp_path) == []
    (tmp_path / "old").mkdir()
    for i in range(3):
        (tmp_path / "old" / f"f{i}").touch()
    with pytest.raises(packing.MoveFailed, match="more than 3 files, folders and links, more than a move carries"):
        packing.pack(str(tmp_path / "old"))


def test_a_pack_is_unpacked_without_tarfiles_extraction_filters_as_on_python_3_11_2(tmp_path, monkeypatch) -> None:
    """Python 3.11.2 (Debian 12's) has no extraction filter: ``extractall(filter=...)`` is a
    TypeError there, and every move that carried files failed. The unpacking neither extracts
    with tarfile nor names a filter: it works with a tarfile that has neither."""
    real = tarfile.TarFile.extractall

    def extractall_of_3_11_2(self, path=".", members=None, *, numeric_owner=False):  # no filter= yet
        return real(self, path, members, numeric_owner=numeric_owner, filter="fully_trusted")

    monkeypatch.setattr(tarfile.TarFile, "extractall", extractall_of_3_11_2)
    for name in ("tar_filter", "data_filter", "fully_trusted_filter", "FilterError"):
        monkeypatch.delattr(tarfile, name)
    folder = tmp_path / "old"
    before = make_folder(folder)
    (folder / "sub").chmod(0o750)
    packed = packing.pack(str(folder))
    packing.unpack(packed.data, str(tmp_path / "new"))
    assert held(tmp_path / "new") == before and (tmp_path / "new" / "sub").stat().st_mode & 0o777 == 0o750


def test_set_id_bits_and_owners_do_not_travel_and_a_changed_old_folder_is_kept(tmp_path) -> None:
    target = tmp_path / "target"
    packing.unpack(_tar((_member("tool", mode=0o6755), b"#!/bin/sh\n")), str(target))
    assert (target / "tool").stat().st_mode & 0o7777 == 0o755 and (target / "tool").stat().st_uid == os.getuid()

    folder = tmp_path / "old"
    make_folder(folder, fifo=True)
    packed = packing.pack(str(folder))
    assert packed.left == ["pipe"] and packed.files == 2
    kept = packing.clear(str(folder), packed.manifest)  # a FIFO cannot travel: the folder stays, and says why
    assert kept is not None and "it holds what a move does not carry (pipe)" in kept and (folder / "pipe").exists()
    (folder / "pipe").unlink()
    packed = packing.pack(str(folder))
    (folder / "a.txt").write_text("written after it was packed")
    kept = packing.clear(str(folder), packed.manifest)
    assert kept is not None and "1 path changed there since it was packed (a.txt)" in kept
    assert (folder / "a.txt").read_text() == "written after it was packed"
    (folder / "a.txt").write_text("hello\n")
    [when] = [e[3] for e in packed.manifest if e[0] == "a.txt"]
    os.utime(folder / "a.txt", ns=(when, when))  # as it was packed
    (tmp_path / "beside").mkdir()  # a new folder named through '..' is not one inside: it is cleared as any
    assert packing.clear(str(folder), packed.manifest, placed=str(folder / ".." / "beside")) is None
    assert not folder.exists() and (tmp_path / "beside").exists()

    (tmp_path / "real").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "real")
    with pytest.raises(packing.MoveFailed, match="cannot be opened"):
        packing.pack(str(tmp_path / "alias"))  # a folder that is a link is not followed either


def test_a_folder_larger_than_a_move_carries_is_refused_in_one_line_before_it_is_read_whole(tmp_path) -> None:
    (tmp_path / "big").mkdir()
    for i in range(3):
        (tmp_path / "big" / f"part{i}").write_bytes(b"x" * 4096)
    with pytest.raises(packing.MoveFailed, match="holds more than 0 MiB of files, more than a move carries"):
        packing.pack(str(tmp_path / "big"), limit=5000)  # over at the second file: the third is never read
