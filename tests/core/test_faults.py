"""Faults: an engine killed at random, a full disk, broken workspace files, bad runners."""

from __future__ import annotations

import asyncio
import os
import random
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import proc_state, until
from procession import State, Workspace
from procession.engine import Engine

KILLS = 200
SEED = 20261129


def _live_pids(db: Path) -> list[int]:
    with sqlite3.connect(db) as conn:
        return [r[0] for r in conn.execute("SELECT pid FROM runs WHERE ended IS NULL AND pid IS NOT NULL")]


async def check_consistent(db: Path, since: int = 0) -> dict[str, int]:
    """Integrity, then recovery by a new engine, then every maintained total against the data
    (for the sessions changed after revision ``since``: the others were checked before)."""
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        if conn.execute("PRAGMA user_version").fetchone()[0] == 0:  # killed while the workspace was being made:
            assert conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0  # nothing of it half-made
            return {"sessions": 0, "runs": 0, "rev": since, "checked": 0}
    orphans = _live_pids(db)
    engine = Engine(db, grace=0.1)
    await engine.start()
    await engine.shutdown()
    for pid in orphans:
        await until(lambda: proc_state(pid) in (None, "Z"))
    ws = await Workspace.open(db)
    try:
        sessions = await ws.ps(all=True)
        rev, changed = await ws.changes(since)
        for s in changed:
            assert s.state is not State.RUNNING, f"session {s.id} is running with no engine"
            history = await ws.history(s.id)
            assert [m.seq for m in history] == list(range(1, s.length + 1)), f"session {s.id} history has holes"
            context = await ws.context(s.id)
            async with ws.store.snapshot() as tx:
                system_tokens = await tx.value("SELECT system_tokens FROM sessions WHERE id = ?", (s.id,))
            assert s.context_tokens == system_tokens + sum(i.tokens for i in context), f"session {s.id} tokens"
            assert s.messages == len(context), f"session {s.id} item count"
        async with ws.store.snapshot() as tx:
            assert await tx.value("SELECT count(*) FROM runs WHERE ended IS NULL") == 0
            born = await tx.value("SELECT count(*) FROM journal WHERE call IN ('spawn', 'fork', 'load')")
            assert born == len(sessions), "a session without its journal row, or a row without its session"
            merged = await tx.value("SELECT count(*) FROM journal WHERE call = 'merge'")
            assert merged == sum(1 for s in sessions if s.reason == "merged")
            runs = await tx.value("SELECT count(*) FROM runs")
            started = await tx.value("SELECT count(*) FROM journal WHERE call = 'start'")
            assert runs == started
    finally:
        await ws.close()
    return {"sessions": len(sessions), "runs": runs, "rev": rev, "checked": len(changed)}


async def test_engine_killed_at_random_points_loses_nothing(tmp_path):
    """SIGKILL a process running an engine and a stream of calls (runs, forks, merges,
    compress, export and load) at seeded random moments; after each kill the workspace is
    intact, every call is wholly there or wholly absent, and the next engine recovers."""
    db = tmp_path / "ws.db"
    zygote = subprocess.Popen([sys.executable, str(Path(__file__).parents[1] / "support" / "crashworker.py"), str(db)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    rng = random.Random(SEED)
    assert zygote.stdin and zygote.stdout
    seen = {"rev": 0}
    try:
        # KILLS kills at least, and on until enough was done between them (on a busy machine a
        # worker does less before its kill: more kills, never another verdict); a bound on the
        # kills guards against a worker that does nothing at all
        for i in range(KILLS * 10):
            if i >= KILLS and seen["sessions"] > 20 and seen["runs"] > 20:
                break
            zygote.stdin.write(f"go {i}\n")
            zygote.stdin.flush()
            pid = int(zygote.stdout.readline().split()[1])
            await asyncio.sleep(rng.uniform(0.02, 0.2))
            os.kill(pid, signal.SIGKILL)
            assert zygote.stdout.readline().strip() == "reaped"
            seen = await check_consistent(db, seen["rev"])
        assert seen["sessions"] > 20 and seen["runs"] > 20, seen
    finally:
        zygote.stdin.close()
        zygote.wait(timeout=10)


def _limit_file_size(size: int):
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    return apply


def test_full_disk_refuses_cleanly_and_recovers(tmp_path, cli):
    cli("spawn", "s", "--agent", "a")
    cli("send", "1", "before")
    with sqlite3.connect(cli.db) as conn:
        before = conn.execute("SELECT count(*), total(length(content)) FROM messages").fetchone()
    size = cli.db.stat().st_size
    env = {**os.environ, "PROCESSION_DB": str(cli.db)}
    full = subprocess.run([sys.executable, "-m", "procession", "send", "1", "-"], input="x" * 2_000_000, text=True,
                          capture_output=True, env=env, preexec_fn=_limit_file_size(size + 64_000))
    assert full.returncode == 1
    assert full.stderr.strip() == f"procession: error: cannot write {cli.db}: the disk is full or failing; nothing was changed"
    with sqlite3.connect(cli.db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("SELECT count(*), total(length(content)) FROM messages").fetchone() == before
        assert conn.execute("SELECT count(*) FROM journal WHERE call = 'send'").fetchone()[0] == 1
    cli("send", "1", "-", input="x" * 2_000_000)
    assert [len(m["content"]) for m in cli.json("history", "1")] == [6, 2_000_000]


def test_broken_workspace_files_are_refused_unchanged(tmp_path, cli):
    cli("spawn", "s", "--agent", "a")
    for i in range(40):
        cli("send", "1", f"message {i} " + "y" * 400)
    good = cli.db.read_bytes()
    cases = {
        "truncated": good[:5000],
        "damaged-header": good[:100] + b"\xff" * 100 + good[200:],
        "damaged-page": good[:4104] + b"\xff" * 600 + good[4704:],
        "not-sqlite": b"just some text, not a database\n" * 10,
    }
    for name, data in cases.items():
        path = tmp_path / f"{name}.db"
        path.write_bytes(data)
        for args in (["ps"], ["send", "1", "hello"], ["spawn", "x", "--agent", "a"]):
            out = subprocess.run([sys.executable, "-m", "procession", "--db", str(path), *args], capture_output=True,
                                 text=True)
            assert out.returncode == 1, (name, args, out.stdout)
            assert out.stderr.startswith("procession: error: ") and out.stderr.count("\n") == 1, (name, out.stderr)
            assert path.read_bytes() == data, f"{name}: the file was modified by {args}"
            assert not Path(f"{path}-wal").exists() or Path(f"{path}-wal").stat().st_size == 0


def test_workspace_from_a_newer_version_is_refused_unchanged(tmp_path, cli):
    cli("spawn", "s", "--agent", "a")
    conn = sqlite3.connect(cli.db)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    data = cli.db.read_bytes()
    out = cli("ps", check=False)
    assert out.returncode == 1 and "made by a newer Procession (schema 99" in out.stderr
    assert cli.db.read_bytes() == data


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("mount") is None, reason="needs root to mount read-only")
def test_read_only_workspace_is_a_one_line_error(tmp_path, cli):
    cli("spawn", "s", "--agent", "a")
    folder = tmp_path / "ro"
    folder.mkdir()
    shutil.copy(cli.db, folder / "ws.db")
    if subprocess.run(["mount", "--bind", str(folder), str(folder)]).returncode != 0:
        pytest.skip("bind mounts are not allowed here")
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(folder)], check=True)
        data = (folder / "ws.db").read_bytes()
        out = subprocess.run([sys.executable, "-m", "procession", "--db", str(folder / "ws.db"), "send", "1", "x"],
                             capture_output=True, text=True)
        assert out.returncode == 1 and "read-only" in out.stderr and out.stderr.count("\n") == 1
        assert (folder / "ws.db").read_bytes() == data
    finally:
        subprocess.run(["umount", str(folder)])


def test_runner_that_exits_mid_line_keeps_what_parsed(cli):
    step = ('command:printf \'{"type": "message", "content": "first"}\\n'
            '{"type": "memory", "set": {"k": 1}}\\n{"type": "message", "cont\'')
    sid = cli("spawn", "cut", "--agent", "a", "--runner", step).stdout.strip()
    out = cli("activate", sid, "--now")
    assert "run 1 ok" in out.stdout
    run = cli.json("runs", sid)[0]
    assert "line 3: cut off before its end" in run["error"]
    assert [m["content"] for m in cli.json("history", sid)] == ["first"]
    assert cli.json("memory", sid, "get", "k") == 1
