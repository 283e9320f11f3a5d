"""People on a shared workspace: ``procession team add NAME`` makes a database role that may use
it, and the journal's ``who`` is the role the server authenticated (``session_user``) before
whatever the caller says of itself, so no one can write as another; a person can read and append
to the journal, never change a row of it (another's least of all); a read-only role reads."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import psycopg
import pytest

from conftest import HANG_S, sql
from procession import Workspace
from procession.model.errors import InvalidArgument


def procession(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "procession", "--db", url, *args], capture_output=True, text=True,
                          timeout=HANG_S)


def as_role(url: str, role: str) -> str:
    return url.replace("postgresql://procession@", f"postgresql://{role}@")


async def test_each_person_is_a_role_the_journal_names_and_no_one_changes_anothers_rows(postgres: Any) -> None:
    url = postgres.workspace()
    await (await Workspace.open(url)).close()
    tag = url.rsplit("%3D", 1)[1]  # roles are the server's, not the schema's: named apart per test
    ana, bob, eve = f"ana_{tag}", f"bob_{tag}", f"eve_{tag}"
    for args in (("add", ana), ("add", bob), ("add", eve, "--read-only")):
        made = procession(url, "team", *args)
        assert made.returncode == 0 and "may use the workspace" in made.stdout, made.stderr
    assert json.loads(procession(url, "team", "--json").stdout) == [
        {"name": ana, "read_only": False}, {"name": bob, "read_only": False}, {"name": eve, "read_only": True}]
    again = procession(url, "team", "add", ana)
    assert again.returncode != 0 and "exists already" in again.stderr and "Traceback" not in again.stderr

    spawned = procession(as_role(url, ana), "spawn", "ana-s", "--agent", "dev", "--json")
    assert spawned.returncode == 0, spawned.stderr
    [(row_id, who)] = sql(url, "SELECT id, who FROM journal WHERE call = 'spawn'")
    assert who.startswith(f"{ana} · ")  # the server's word first, whatever the process claims after it
    with psycopg.connect(as_role(url, bob), autocommit=True) as conn:
        for statement in (f"UPDATE journal SET who = 'nobody' WHERE id = {row_id}", f"DELETE FROM journal WHERE id = {row_id}"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
    assert sql(url, f"SELECT who FROM journal WHERE id = {row_id}") == [(who,)]
    sent = procession(as_role(url, bob), "send", str(json.loads(spawned.stdout)["sid"]), "from bob")
    assert sent.returncode == 0, sent.stderr
    looked = procession(as_role(url, eve), "ps")
    assert looked.returncode == 0 and "ana-s" in looked.stdout
    refused = procession(as_role(url, eve), "spawn", "eve-s", "--agent", "dev")
    assert refused.returncode != 0 and "read-only for this database role" in refused.stderr

    removed = procession(url, "team", "remove", bob)
    assert removed.returncode == 0, removed.stderr
    gone = procession(as_role(url, bob), "ps")
    assert gone.returncode != 0 and "Traceback" not in gone.stderr
    rows = sql(url, "SELECT call, who FROM journal WHERE call IN ('team', 'send') ORDER BY id")
    assert [call for call, _ in rows] == ["team", "team", "team", "send", "team"]
    assert rows[3][1].startswith(f"{bob} · ")


async def test_a_team_needs_a_shared_workspace_and_a_plain_name(tmp_path: Any, postgres: Any) -> None:
    async with await Workspace.open(tmp_path / "ws.db") as ws:
        with pytest.raises(InvalidArgument, match="a team needs a shared, PostgreSQL workspace"):
            await ws.team_add("ana")
    async with await Workspace.open(postgres.workspace()) as ws:
        for name in ("Ana", "pg_ana", "ana; DROP TABLE sessions", ""):
            with pytest.raises(InvalidArgument, match="cannot name a role"):
                await ws.team_add(name)
