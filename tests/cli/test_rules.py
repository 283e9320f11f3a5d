"""Rules never let one program run another unasked: ``allow --always`` on a shell command makes
a rule for exactly that command (a program known to run no other: any arguments), a command
line is allowed unasked only when a rule covers each of its parts, and a rule an older
Procession made for a program with any arguments is read as narrowly as it can be. The real
CLI answers; the engine's ledger asks, as a run's agent does."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import Cli, sql
from procession import Workspace
from procession.engine.ledger import Ledger
from procession.model.outcomes import Asked

Ask = Callable[[str], Awaitable[Asked]]


@pytest.fixture
async def asker(db: Path, tmp_path: Path) -> AsyncIterator[tuple[int, Ask]]:
    """A session under ``--permissions ask`` with a run under way, and its agent's ``ask``."""
    async with await Workspace.open(db) as ws:
        sid = (await ws.spawn("careful", "dev", runner="builtin:echo", cwd=str(tmp_path), permissions="ask")).sid
        ledger = Ledger(ws.store, actor="engine")
        await ledger.acquire("test", 1, None)
        await ledger.activate(sid)
        await ledger.start_run(sid, runner="builtin:echo", engine="test")

        async def ask(command: str) -> Asked:
            return await ledger.as_actor("agent").ask(sid, "Bash", {"command": command})

        yield sid, ask


async def test_a_rule_for_a_program_that_runs_others_allows_only_the_words_it_was_allowed_with(
        cli: Cli, asker: tuple[int, Ask]) -> None:
    sid, ask = asker
    first = await ask("ionice -c3 true")
    assert first.answer is None
    cli("allow", str(first.request), "--always")
    for other in ("ionice -c3 rm -f precious.txt", "ionice -c3 true; rm -f precious.txt", "ionice -c3 true x",
                  "ionice -c3 true > precious.txt", "ionice -c3 true $(rm -f precious.txt)"):
        assert (await ask(other)).answer is None, other
    assert (await ask("ionice -c3 true")).answer == "allow"
    assert [(r["reads"], r["matches"]) for r in cli.json("rules", str(sid))] == [("=ionice -c3 true", "exactly")]
    assert "Bash(exactly: ionice -c3 true)" in cli("rules").stdout


async def test_a_program_that_runs_no_other_takes_any_arguments_and_a_line_needs_a_rule_for_each_part(
        cli: Cli, asker: tuple[int, Ask]) -> None:
    sid, ask = asker
    for command in ("ls -la", "grep -rn TODO .", "git status"):
        cli("allow", str((await ask(command)).request), "--always")
    assert [(r["reads"], r["matches"]) for r in cli.json("rules", str(sid))] == [
        ("ls", "any arguments"), ("grep", "any arguments"), ("=git status", "exactly")]
    assert "Bash(ls: any arguments)" in cli("rules", str(sid)).stdout
    for allowed in ("ls *.py", "ls -la | grep x && git status 2>&1", "git status >/dev/null; ls"):
        found = await ask(allowed)
        assert found.answer == "allow", allowed
    assert (await ask("ls | grep x && git status")).by == "rules 1, 2, 3"
    for asks in ("ls | sh", "ls && git push", "ls > listing", "ls `rm x`", "FOO=1 ls", "/bin/ls", "grep x $(cat f)",
                 "git status --porcelain", "ls; (rm x)"):
        assert (await ask(asks)).answer is None, asks


async def test_an_old_rule_for_a_program_with_any_arguments_allows_only_the_call_it_was_made_from(
        cli: Cli, db: Path, asker: tuple[int, Ask]) -> None:
    """As an older Procession left them: ``git`` (its call known), ``make`` (its call gone) and
    ``cat`` (a program that runs no other) for any arguments."""
    sid, ask = asker
    made = (await ask("git push origin main")).request
    cli("deny", str(made))
    for subject, request in (("git", made), ("make", None), ("cat", None)):
        sql(db, "INSERT INTO rules (session_id, tool, subject, made, request_id) VALUES (?, 'Bash', ?, 0, ?)",
            (sid, subject, request))
    rules = cli.json("rules", str(sid))
    assert [(r["subject"], r["reads"], r["matches"]) for r in rules] == [
        ("git", "=git push origin main", "exactly"), ("make", None, "nothing"), ("cat", "cat", "any arguments")]
    said = cli("rules", str(sid)).stdout
    assert "Bash(exactly: git push origin main)" in said and "allows only the call it was made from" in said
    assert "Bash(nothing)" in said and "it allows nothing now" in said
    assert (await ask("git push origin main")).answer == "allow"
    assert (await ask("cat README")).answer == "allow"
    for asks in ("git -c alias.x='!rm -rf ~' x", "git push --force", "make", "make test"):
        assert (await ask(asks)).answer is None, asks
