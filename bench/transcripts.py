#!/usr/bin/env python3
"""Reading the agent CLIs' own session stores (``procession.model.transcripts``): what
``adopt``, ``adopt --all`` and ``sync`` pay in each format, Claude Code, Codex and opencode.

    python bench/transcripts.py [--tiny] [--only claude,codex,opencode] [--rounds N] [--sessions N]
                                [--session-rounds N] [--reps N] [--json-out FILE] [--keep]

Every home is generated under a temporary folder, by each format's own ``write`` (the writer
``migrate`` uses, whose output the real CLIs resume: tests/agents). A *round* is a prompt, a
text, two Bash calls (outputs of 1 KB and 6 KB) and a final text: 5 messages. Claude Code's
files then get what the CLI writes beside the conversation and ``write`` leaves out (a queue
operation and two ~6 KB listing attachments per prompt, each tool result again as
``toolUseResult``), so that they weigh what the CLI's own do. opencode's database has the
CLI's own schema: the real ``opencode`` (on PATH, or ``$PROCESSION_OPENCODE``) imports what
``write`` built, and a home of many sessions is that session's rows copied under new ids (an
import takes about a second). Without the CLI, opencode is skipped (said in ``skipped``).

Per format, on one session of ``--rounds`` rounds: ``read`` of it whole (``adopt``); ``read``
from a saved position with nothing new (a sync of an idle session), with one new round (the
usual sync: JSONL formats parse only the new lines), and for Claude Code from a position taken
while a tool's result was not written yet (the whole file is parsed again). On a home of
``--sessions`` sessions of ``--session-rounds`` rounds in 25 folders: ``discover``, ``find`` by
id, and ``discover`` then ``read`` of every session (``adopt --all`` without the store; the
whole process is bench/adopt.py). Each figure is the median of ``--reps`` runs after one
untimed warm-up (``read every session``: a third of them). Prints a table, then one JSON
object on the last line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from report import Results, environment, publish

from procession.model import agents
from procession.model.errors import InvalidArgument
from procession.model.toolcalls import tool_message
from procession.model.transcripts import Found, Position, Said, format_of

FULL = {"rounds": 150, "sessions": 500, "session_rounds": 8, "reps": 7}
TINY = {"rounds": 5, "sessions": 5, "session_rounds": 2, "reps": 1}
#: The model ``write`` names (opencode's must be PROVIDER/MODEL).
#: The formats measured: those Procession writes, which make the sessions at any size (Gemini
#: CLI's and Qwen Code's chats it only reads, and runs over ACP; their reads are tested instead).
WRITTEN = ("claude", "codex", "opencode")
MODEL = "scripted/scripted-model"
#: A round's messages (see the module's docstring).
ROUND = 5
LISTING = "- skill: " + "does one thing well, described at length. " * 140  # ~6 KB, as the CLI's listings


def prompt(n: int) -> str:
    """Round ``n``'s prompt; ``round {n}:`` marks where the round begins in a JSONL file."""
    return f"round {n}: please look at part {n} of the project and fix what is wrong there"


def history(rounds: int, tag: str = "") -> list[Said]:
    out = []
    for n in range(rounds):
        out.append(Said("user", prompt(n)))
        out.append(Said("assistant", "Let me look at the files first. " * 6))
        for size in (1024, 6 * 1024):
            output = ("src/module.py:12: a line of output that the command printed\n" * (size // 60))[:size]
            out.append(Said(*tool_message(f"call{tag}_{n}_{size}", "Bash",
                                          {"command": f"grep -rn part{n} src | head -{size // 64}"}, output, False)))
        out.append(Said("assistant", "Fixed: the part now does what it says. " * 8))
    return out


def fresh_env(home: Path) -> dict[str, str]:
    """This environment with ``home`` as HOME for every CLI, without the variables that point
    one elsewhere (``CLAUDE_CONFIG_DIR``, ``CODEX_HOME``, ``OPENCODE_*``, ``XDG_*``)."""
    own = {k: v for k, v in os.environ.items()
           if k not in ("CLAUDE_CONFIG_DIR", "CODEX_HOME") and not k.startswith(("OPENCODE_", "XDG_"))}
    return {**own, "HOME": str(home), "XDG_DATA_HOME": str(home / ".local" / "share"),
            "XDG_CONFIG_HOME": str(home / ".config"), "XDG_CACHE_HOME": str(home / ".cache"),
            "XDG_STATE_HOME": str(home / ".local" / "state"), "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_AUTOUPDATE": "1"}


def make_home(root: Path, cli: str, sessions: int, rounds: int) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """A fresh home under ``root`` whose ``cli`` keeps ``sessions`` sessions of ``rounds``
    rounds, in 25 working folders under ``root / "work"``: its environment, and the agent
    references of the sessions written (opencode: the first; the others are its copies)."""
    fmt, env = format_of(cli), fresh_env(root / "home")
    refs = []
    for i in range(1 if cli == "opencode" else sessions):
        folder = root / "work" / f"project{i % 25}"
        folder.mkdir(parents=True, exist_ok=True)
        ref = fmt.write(history(rounds, str(i)), env, str(folder), MODEL)
        assert ref is not None
        if cli == "claude":
            _as_claude_code_writes(Path(ref["transcript"]))
        refs.append(ref)
    if cli == "opencode" and sessions > 1:
        _copies(refs[0], sessions - 1)
    return env, refs


def _as_claude_code_writes(path: Path) -> None:
    """Add to a transcript what Claude Code writes beside the conversation (see the module's
    docstring): the listings are chained after their prompt, as the CLI chains them."""
    out: list[dict[str, Any]] = []
    after: dict[str, str] = {}  # a prompt's uuid -> the last attachment chained after it
    for record in map(json.loads, path.read_text().splitlines()):
        record["parentUuid"] = after.get(record.get("parentUuid"), record.get("parentUuid"))
        content = (record.get("message") or {}).get("content")
        if record.get("type") == "user" and isinstance(content, str):
            out += [{"type": "queue-operation", "operation": "enqueue", "sessionId": record["sessionId"],
                     "content": content}, record]
            parent = record["uuid"]
            for kind in ("agent_listing_delta", "skill_listing"):
                attachment = {k: v for k, v in record.items() if k != "message"}
                attachment.update(type="attachment", parentUuid=parent, uuid=str(uuid.uuid4()),
                                  attachment={"type": kind, "content": LISTING})
                out.append(attachment)
                parent = attachment["uuid"]
            after[record["uuid"]] = parent
            continue
        if record.get("type") == "user" and isinstance(content, list):
            record["toolUseResult"] = {"stdout": content[0]["content"], "stderr": "", "interrupted": False}
        out.append(record)
    path.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in out))


def _copies(ref: dict[str, Any], copies: int) -> None:
    """The session's rows copied ``copies`` times under new ids, in one transaction."""
    con = sqlite3.connect(ref["transcript"], isolation_level=None)
    try:
        tables = {t: [r[1] for r in con.execute(f"PRAGMA table_info({t})")] for t in ("session", "message", "part")}
        rows = {t: con.execute(f"SELECT * FROM {t} WHERE {'id' if t == 'session' else 'session_id'} = ?",
                               (ref["id"],)).fetchall() for t in tables}
        con.execute("BEGIN")
        for copy in range(1, copies + 1):
            tag = f"{copy:06d}"
            for name, columns in tables.items():
                renamed = [tuple(_renamed(columns[i], v, tag) for i, v in enumerate(row)) for row in rows[name]]
                con.executemany(f"INSERT INTO {name} VALUES ({', '.join('?' * len(columns))})", renamed)
        con.execute("COMMIT")
    finally:
        con.close()


def _renamed(column: str, value: Any, tag: str) -> Any:
    """An id of the copied session's rows made unique for copy ``tag`` (same length, same
    prefix and clock digits: only the random tail changes)."""
    if column in ("id", "session_id", "message_id") and isinstance(value, str) and value[:4] in ("ses_", "msg_", "prt_"):
        return value[:-6] + tag
    if column == "time_updated" and isinstance(value, int):
        return value + int(tag)
    return value


def round_start(text: bytes, n: int) -> int:
    """Where round ``n`` begins in a JSONL transcript: the line that first names its prompt."""
    return text.rindex(b"\n", 0, text.index(prompt(n).encode())) + 1


def position_at(cli: str, found: Found, at: bytes) -> Position:
    """The position a read gave when the file held only ``at`` (a JSONL transcript's first
    bytes): the file is cut to them, read, and put back."""
    path = Path(found.path)
    whole = path.read_bytes()
    path.write_bytes(at)
    try:
        return format_of(cli).read(found).position
    finally:
        path.write_bytes(whole)


def before_last_round(cli: str, found: Found, rounds: int) -> Position:
    """The position a read gave before the session's last round was written. opencode's is the
    message before that round's prompt (messages in opencode's order: time, then id)."""
    if cli != "opencode":
        whole = Path(found.path).read_bytes()
        return position_at(cli, found, whole[:round_start(whole, rounds - 1)])
    con = sqlite3.connect(f"file:{found.path}?mode=ro", uri=True)
    try:
        ids = con.execute("SELECT id, json_extract(data, '$.role') FROM message WHERE session_id = ?"
                          " ORDER BY time_created, id", (found.id,)).fetchall()
    finally:
        con.close()
    last_prompt = max(i for i, (_, role) in enumerate(ids) if role == "user")
    return Position(last=ids[last_prompt - 1][0])


def timed(call: Callable[[], Any], reps: int) -> list[float]:
    call()
    runs = []
    for _ in range(reps):
        began = time.perf_counter()
        call()
        runs.append(time.perf_counter() - began)
    return runs


def measure(cli: str, root: Path, sizes: dict[str, int], results: Results) -> None:
    fmt, reps, rounds = format_of(cli), sizes["reps"], sizes["rounds"]
    env, [ref] = make_home(root / "one", cli, 1, rounds)
    found = fmt.find(env, ref["id"])
    weight = os.path.getsize(found.path)
    size = f"{rounds} rounds, " + (f"{weight / 1e6:.1f} MB" if weight >= 1e6 else f"{weight / 1e3:.0f} KB")
    read = fmt.read(found)
    assert len(read.messages) == ROUND * rounds, len(read.messages)
    results.record(f"{cli}_read_whole", f"{cli}: read whole", size, timed(lambda: fmt.read(found), reps),
                   goal="< 0.5 s", check=lambda s: s < 0.5)
    assert not fmt.read(found, read.position).messages
    results.record(f"{cli}_read_idle", f"{cli}: read on, nothing new", size,
                   timed(lambda: fmt.read(found, read.position), reps), goal="< 5 ms", check=lambda s: s < 0.005)
    before = before_last_round(cli, found, rounds)
    assert len(fmt.read(found, before).messages) == ROUND
    results.record(f"{cli}_read_turn", f"{cli}: read on, one new round", size,
                   timed(lambda: fmt.read(found, before), reps), goal="< 10 ms", check=lambda s: s < 0.01)
    if cli == "claude":
        whole = Path(found.path).read_bytes()
        last = round_start(whole, rounds - 1)
        mid = position_at(cli, found, whole[:whole.rindex(b"\n", 0, whole.index(b'"tool_result"', last)) + 1])
        assert [m.role for m in fmt.read(found, mid).messages] == ["tool", "tool", "assistant"]
        results.record("claude_read_reparse", "claude: read on from before a tool's result (whole file)", size,
                       timed(lambda: fmt.read(found, mid), reps))

    many, _ = make_home(root / "many", cli, sizes["sessions"], sizes["session_rounds"])
    listed = list(fmt.discover(many))
    assert len(listed) == sizes["sessions"], len(listed)
    size = f"{sizes['sessions']} sessions of {sizes['session_rounds']} rounds"
    results.record(f"{cli}_discover", f"{cli}: discover", size, timed(lambda: list(fmt.discover(many)), reps))
    ident = listed[len(listed) // 2].id
    results.record(f"{cli}_find", f"{cli}: find by id", size, timed(lambda: fmt.find(many, ident), reps))

    def read_every() -> None:
        for each in fmt.discover(many):
            fmt.read(each)

    results.record(f"{cli}_read_all", f"{cli}: discover, read every session", size,
                   timed(read_every, max(1, reps // 3)), goal="< 10 s at 500",
                   check=(lambda s: s < 10) if sizes["sessions"] == 500 else None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="5 rounds, 5 sessions of 2, one run (the suite runs it)")
    parser.add_argument("--only", default=",".join(WRITTEN), help="formats, comma-separated")
    parser.add_argument("--rounds", type=int, default=FULL["rounds"], help="rounds of the one session read")
    parser.add_argument("--sessions", type=int, default=FULL["sessions"], help="sessions of the home discovered")
    parser.add_argument("--session-rounds", type=int, default=FULL["session_rounds"])
    parser.add_argument("--reps", type=int, default=FULL["reps"])
    parser.add_argument("--json-out", metavar="FILE")
    parser.add_argument("--keep", action="store_true", help="keep the homes (the folder is printed)")
    args = parser.parse_args()
    sizes = dict(TINY) if args.tiny else {"rounds": args.rounds, "sessions": args.sessions,
                                          "session_rounds": args.session_rounds, "reps": args.reps}
    root = Path(tempfile.mkdtemp(prefix="procession-bench-transcripts-"))
    began = time.perf_counter()
    results, skipped = Results(), {}
    try:
        for cli in args.only.split(","):
            format_of(cli)  # an unknown name is refused before anything is built
            if cli == "opencode":
                try:
                    agents.locate(cli)
                except InvalidArgument as missing:
                    skipped[cli] = str(missing)
                    print(f"opencode skipped: {missing}", file=sys.stderr)
                    continue
            print(f"{cli}: {sizes}", file=sys.stderr, flush=True)
            measure(cli, root / cli, sizes, results)
        env = environment(root)
    finally:
        if args.keep:
            print(f"kept {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    report = {"mode": "tiny" if args.tiny else "full", "sizes": sizes, "skipped": skipped, "environment": env,
              "total_seconds": round(time.perf_counter() - began, 1), **results.summary()}
    publish(results.rows, report, args.json_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
