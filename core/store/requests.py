"""What a session's agent asked a person (``requests``), the rules ``allow --always`` made
(``rules``), and what the permission calls ask of sessions and runs to answer them."""

from __future__ import annotations

from collections.abc import Sequence

from .base import Row, Tx

#: The rules with the input of the call each was made from (what an old one is read as).
_RULES = "SELECT r.*, q.input AS made_from FROM rules r LEFT JOIN requests q ON q.id = r.request_id"
#: A request with the names of its session and its agent, as ``Request`` records hold it.
_REQUEST = ("SELECT r.*, s.name AS session_name, a.name AS agent_name FROM requests r"
            " JOIN sessions s ON s.id = r.session_id JOIN agents a ON a.id = s.agent_id")


# ---------------------------------------------------------------- requests


async def asking_run(tx: Tx, sid: int) -> int | None:
    """The run of ``sid`` under way, which a request it makes now belongs to."""
    found = await tx.value("SELECT id FROM runs WHERE session_id = ? AND ended IS NULL ORDER BY id DESC"
                           " LIMIT 1", (sid,))
    return None if found is None else int(found)


async def take_carried(tx: Tx, sid: int, tool: str, input: str) -> Row | None:
    """The first answer carried out of an ended run for this very call (``input``: its JSON
    text), now spent: a call asked again gets its answer once."""
    carried = await tx.one("SELECT id, answer, why FROM requests WHERE session_id = ? AND carried = 1"
                           " AND tool = ? AND input = ? ORDER BY id LIMIT 1", (sid, tool, input))
    if carried is not None:
        await tx.execute("UPDATE requests SET carried = 0 WHERE id = ?", (carried["id"],))
    return carried


async def insert_request(tx: Tx, sid: int, run: int | None, tool: str, input: str, subject: str,
                         key: str | None, answer: str | None, why: str | None, answered_by: str | None) -> int:
    """A new request, asked now; answered now too when ``answer`` is given."""
    return await tx.insert(
        "INSERT INTO requests (session_id, run_id, tool, input, subject, key, asked, answer, why, answered,"
        " answered_by) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (sid, run, tool, input, subject, key, tx.now, answer, why, tx.now if answer is not None else None,
         answered_by))


async def request_row(tx: Tx, request: int) -> Row | None:
    return await tx.one("SELECT * FROM requests WHERE id = ?", (request,))


async def request(tx: Tx, request: int) -> Row | None:
    """One request, with its session's and agent's names."""
    return await tx.one(f"{_REQUEST} WHERE r.id = ?", (request,))


async def waiting(tx: Tx, sids: Sequence[int] | None = None) -> list[Row]:
    """The requests waiting for an answer, with their session's and agent's names, oldest
    first (of ``sids`` only, when given)."""
    where = "r.answer IS NULL"
    args: list[int] = []
    if sids is not None:
        where += f" AND r.session_id IN ({','.join('?' * len(sids))})"
        args += sids
    return await tx.all(f"{_REQUEST} WHERE {where} ORDER BY r.id", args)


async def open_requests(tx: Tx, sid: int, tool: str, besides: int) -> list[Row]:
    """The ids and inputs of ``sid``'s other open requests of ``tool`` (not ``besides``), oldest first."""
    return await tx.all("SELECT id, input FROM requests WHERE session_id = ? AND answer IS NULL AND id != ? AND tool = ?"
                        " ORDER BY id", (sid, besides, tool))


async def asking(tx: Tx, sid: int) -> bool:
    """Whether a request of session ``sid`` is still open."""
    return bool(await tx.value("SELECT 1 FROM requests WHERE session_id = ? AND answer IS NULL LIMIT 1", (sid,)))


async def answer(tx: Tx, ids: Sequence[int], answer: str, why: str | None, by: str, carried: bool) -> None:
    """Answer the requests ``ids`` now; ``carried``: into a new run, theirs having ended."""
    marks = ",".join("?" * len(ids))
    await tx.execute(f"UPDATE requests SET answer = ?, why = ?, answered = ?, answered_by = ?, carried = ?"
                     f" WHERE id IN ({marks})", (answer, why, tx.now, by, int(carried), *ids))


async def asker_left(tx: Tx, request: int, withdrawn: str) -> None:
    """Mark ``request`` ``withdrawn``: whoever asked it stopped waiting."""
    await tx.execute("UPDATE requests SET answer = ?, answered = ?, answered_by = 'its asker left'"
                     " WHERE id = ?", (withdrawn, tx.now, request))


async def session_host(tx: Tx, sid: int) -> str | None:
    """The host session ``sid`` is on, whose engine hears the answers to its runs' requests."""
    host: str | None = await tx.value("SELECT host FROM sessions WHERE id = ?", (sid,))
    return host


async def run_engine(tx: Tx, run: int) -> str | None:
    """The lease token of the engine that ran run ``run``."""
    token: str | None = await tx.value("SELECT engine FROM runs WHERE id = ?", (run,))
    return token


# ---------------------------------------------------------------- rules


async def put_rule(tx: Tx, sid: int, tool: str, subject: str, request: int) -> int:
    """The rule of ``sid`` that allows ``tool`` on ``subject``, made now from ``request`` unless
    there is one already."""
    await tx.execute("INSERT INTO rules (session_id, tool, subject, made, request_id)"
                     " VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING", (sid, tool, subject, tx.now, request))
    return int(await tx.value("SELECT id FROM rules WHERE session_id = ? AND tool = ? AND subject = ?",
                              (sid, tool, subject)))


async def rule(tx: Tx, rule: int) -> Row | None:
    return await tx.one("SELECT * FROM rules WHERE id = ?", (rule,))


async def drop_rule(tx: Tx, rule: int) -> None:
    await tx.execute("DELETE FROM rules WHERE id = ?", (rule,))


async def rules(tx: Tx, sid: int | None = None) -> list[Row]:
    """Every rule (of session ``sid``, when given), with what it was made from (``made_from``)."""
    return await tx.all(_RULES + (" WHERE r.session_id = ?" if sid is not None else "") + " ORDER BY r.id",
                        (sid,) if sid is not None else ())


async def tool_rules(tx: Tx, sid: int, tool: str) -> list[Row]:
    """Session ``sid``'s rules of ``tool``, oldest first, as ``rules`` reads them."""
    return await tx.all(_RULES + " WHERE r.session_id = ? AND r.tool = ? ORDER BY r.id", (sid, tool))


async def of_runs(tx: Tx, sid: int, runs: Sequence[int]) -> list[Row]:
    """What session ``sid``'s runs ``runs`` asked, in the order they asked it."""
    if not runs:
        return []
    return await tx.all(f"SELECT * FROM requests WHERE session_id = ? AND run_id IN ({', '.join('?' * len(runs))})"
                        " ORDER BY id", (sid, *runs))
