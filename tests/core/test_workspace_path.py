"""The workspace path: only a file on disk, made absolute at once, safe to create from many
processes at the same moment, and able to say when the file open is no longer the one at
its path."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from procession.store import default_target
from procession.store.sqlite import SqliteStore as Store
from procession.store import schema

#: Runs the real CLI once every process of a batch has imported it, at one agreed moment.
AT_ONCE = ("import sys, time; from procession.cli import main; at = float(sys.argv[1]);"
           " time.sleep(max(0.0, at - time.time())); sys.exit(main(sys.argv[2:]))")


def cli_at_once(cwd: Path, commands: list[list[str]]) -> list[subprocess.CompletedProcess[str]]:
    at = str(time.time() + 3.0)
    procs = [subprocess.Popen([sys.executable, "-c", AT_ONCE, at, *args], cwd=cwd, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for args in commands]
    done = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        done.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    return done


def refused(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 1, (out.returncode, out.stderr)
    assert out.stderr.startswith("procession: error:") and out.stderr.count("\n") == 1, out.stderr
    return out.stderr


@pytest.mark.parametrize("db, says", [
    (":memory:", "not a workspace file"), ("file:ws.db", "not a workspace file"),
    ("file:/tmp/x.db?mode=memory", "not a workspace file"), ("", "the workspace path is empty"),
    ("  ", "the workspace path is empty"), ("sub/", "names a folder"), (".", "not a workspace file"),
], ids=["memory", "uri", "uri-memory", "empty", "blank", "trailing-slash", "folder"])
def test_paths_that_name_no_workspace_file_are_refused_in_one_line(cli, tmp_path, db, says):
    before = sorted(p.name for p in tmp_path.iterdir())
    for args in (["spawn", "s", "--agent", "a"], ["ps"]):
        assert says in refused(cli(*args, "--db", db, check=False))
    assert sorted(p.name for p in tmp_path.iterdir()) == before, "nothing was created"


@pytest.mark.parametrize("db", ["mysql://u@db/procession", "sqlite:///ws.db", "postgresq://u@db/procession"])
def test_an_address_of_a_scheme_no_store_speaks_is_refused_naming_those_known(cli, tmp_path, db):
    """Taken for a path, ``--db mysql://u@db/x`` made the folders ``mysql:/u@db`` and a
    workspace in them; every way a workspace is named refuses it, and creates nothing."""
    before = sorted(p.name for p in tmp_path.iterdir())
    says = f"{db}: no workspace is at a {db.split(':')[0]}:// address; a workspace is a file or a postgresql:// or" \
           " postgres:// address"
    for args in (["spawn", "s", "--agent", "a", "--db", db], ["ps", "--db", db], ["--db", db],
                 ["migrate-store", db, "new.db"], ["migrate-store", "none.db", db]):
        assert says in refused(cli(*args, check=False))
    spawned = subprocess.run([sys.executable, "-m", "procession", "spawn", "s", "--agent", "a"], cwd=tmp_path,
                             env={**os.environ, "PROCESSION_DB": db}, capture_output=True, text=True)
    assert says in refused(spawned)
    assert sorted(p.name for p in tmp_path.iterdir()) == before, "nothing was created"


async def test_a_relative_path_is_made_absolute_at_once(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    store = await Store.open("rel/ws.db")
    try:
        assert store.path == tmp_path / "rel" / "ws.db"
    finally:
        await store.close()
    monkeypatch.setenv("PROCESSION_DB", "rel/../other.db")
    assert default_target() == tmp_path / "other.db"
    monkeypatch.setenv("PROCESSION_DB", "postgresql://procession@db/procession")  # an address, as it is
    assert default_target() == "postgresql://procession@db/procession"


def test_a_step_reads_the_workspace_path_absolute(cli, tmp_path):
    """The step runs in its session's folder, where a relative path would name another file."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "rel").mkdir()
    cli("spawn", "s", "--agent", "a", "--db", "rel/ws.db", "--runner", "command:printf %s \"$PROCESSION_DB\"")
    cli("bind", "1", "folder", str(elsewhere), "--db", "rel/ws.db")
    cli("activate", "1", "--now", "--db", "rel/ws.db")
    history = cli.json("history", "1", "--db", "rel/ws.db")
    assert [m["content"] for m in history] == [str(tmp_path / "rel" / "ws.db")]


def test_eight_first_spawns_at_once_on_a_new_path_all_succeed(tmp_path):
    """Eight processes make the same new workspace at the same moment: one migrates, the
    others wait for it; none takes the half-made file for another program's database, none
    is refused a lock it could have waited for."""
    for round_ in range(3):
        db = tmp_path / f"new-{round_}.db"
        results = cli_at_once(tmp_path, [["spawn", f"s{i}", "--agent", "a", "--db", str(db)] for i in range(8)])
        assert [r.returncode for r in results] == [0] * 8, [r.stderr for r in results if r.returncode]
        con = sqlite3.connect(db)
        try:
            assert con.execute("SELECT count(*) FROM sessions").fetchone() == (8,)
            assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
            assert con.execute("PRAGMA user_version").fetchone() == (schema.VERSION,)
            assert con.execute("SELECT count(*) FROM meta WHERE key = 'uuid'").fetchone() == (1,)
            assert sorted(int(r.stdout) for r in results) == list(range(1, 9))
        finally:
            con.close()


async def test_same_file_says_when_the_path_no_longer_names_the_open_workspace(tmp_path):
    path = tmp_path / "ws.db"
    store = await Store.open(path)
    other = await Store.open(tmp_path / "other.db")
    await other.close()
    try:
        assert store.same_file() is None
        again = await Store.open(path)  # another connection coming and going changes nothing
        await again.close()
        assert store.same_file() is None

        os.rename(path, tmp_path / "moved.db")
        assert "is gone" in (store.same_file() or "")
        os.rename(tmp_path / "moved.db", path)
        assert store.same_file() is None

        aside = tmp_path / "aside.db"
        os.link(path, aside)
        os.replace(tmp_path / "other.db", path)  # another workspace put in its place
        said = store.same_file()
        assert said and "is another file now" in said and "\n" not in said
        os.replace(aside, path)
        assert store.same_file() is None

        os.remove(f"{path}-wal")
        said = store.same_file()
        assert said and f"{path}-wal was deleted" in said
    finally:
        await store.close()
