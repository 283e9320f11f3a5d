"""JSON values at the edge: every value that enters (a memory value, a ``--set`` value, a
runner's memory event, a snapshot file, a transcript) is JSON that every later step can
encode again — nested at most 64 deep, at most 1 MiB, no NaN or Infinity, no integer Python
cannot convert — or it is refused in one line and the store is left as it was."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
from pathlib import Path

import pytest

from conftest import dump
from procession import ProcessionError
from procession.calls.merge import Resolution
from procession.engine.runners import protocol
from procession.model import limits
from procession.model.snapshot import canonical_bytes

BIG = 2**70  # beyond SQLite's 64-bit integers: JSON text, stored as text


def deep(n: int, leaf: str = "1") -> str:
    return "[" * n + leaf + "]" * n


def refused(out: subprocess.CompletedProcess[str]) -> str:
    """One line, exit 1, no traceback: a user's mistake, not a crash."""
    assert out.returncode == 1, (out.returncode, out.stderr[-2000:])
    assert out.stderr.startswith("procession: error:") and out.stderr.count("\n") == 1, out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    return out.stderr


def raw_snapshot(payload_text: str) -> bytes:
    """A snapshot file around payload text written by hand, with the right hash wherever one
    can be computed (NaN has no canonical form): only the content can be refused."""
    try:
        digest = hashlib.sha256(canonical_bytes(json.loads(payload_text))).hexdigest()
    except (ValueError, RecursionError, ProcessionError):  # a 5000-digit integer; too deep; NaN
        digest = "0" * 64
    head = {"format": "procession.snapshot", "version": 1, "sha256": digest}
    return (json.dumps(head)[:-1] + ', "payload": ' + payload_text + "}").encode()


def payload(memory: str = "{}") -> str:
    session = {"uuid": "u", "name": "n", "agent": "a", "goal": "", "system": "", "priority": 0,
               "runner": "builtin:echo", "window": 1000, "timeout": None, "created": 0.0}
    return ('{"session": ' + json.dumps(session) + ', "messages": [], "folds": [], "memory": ' + memory
            + ', "resources": [], "triggers": []}')


def test_a_980_deep_memory_value_is_refused_and_the_store_is_unchanged(cli, db):
    """It used to be stored, and then broke building a step's document and saving a snapshot."""
    cli("spawn", "s", "--agent", "a", "--runner", "builtin:echo")
    before = dump(db)
    assert "nested deeper than 64 levels" in refused(cli("memory", "1", "set", "k", deep(980), check=False))
    assert dump(db) == before
    # the deepest value allowed works everywhere a value goes
    cli("memory", "1", "set", "k", deep(64))
    assert cli.json("memory", "1", "get", "k") == json.loads(deep(64))
    cli("save", "1", "-o", str(db.parent / "s.json"))
    assert cli("activate", "1", "--now").returncode == 0


@pytest.mark.parametrize("value", ["NaN", "Infinity", "[-Infinity]", "[1, NaN]", '{"a": {"b": Infinity}}', "1e400"])
def test_nan_and_infinity_are_refused_from_the_command_line(cli, db, value):
    cli("spawn", "s", "--agent", "a")
    cli("fork", "1")
    before = dump(db)
    assert "JSON" in refused(cli("memory", "1", "set", "k", value, check=False))
    assert "JSON" in refused(cli("merge", "2", "1", "--set", f"k={value}", check=False))
    transcript = db.parent / "t.jsonl"
    transcript.write_text('{"role": "user", "content": "fine"}\n{"role": "user", "content": "x", "n": %s}\n' % value)
    assert "line 2" in refused(cli("send", "1", "--jsonl", str(transcript), check=False))
    assert dump(db) == before


async def test_the_api_never_stores_nan_infinity_or_what_json_cannot_say(ws):
    sid = (await ws.spawn("s", "a")).sid
    for value in (float("nan"), float("inf"), [1, float("-inf")], {1: "a key that is not text"}, {"k": object()},
                  10 ** 5000):
        with pytest.raises(ProcessionError) as caught:
            await ws.memory_set(sid, "k", value)
        assert "\n" not in str(caught.value)
    cycle: list[object] = []
    cycle.append(cycle)
    with pytest.raises(ProcessionError, match="nested deeper than 64"):
        await ws.memory_set(sid, "k", cycle)
    with pytest.raises(ProcessionError, match="nested deeper than 64"):
        await ws.memory_set(sid, "k", json.loads(deep(200)))
    assert (await ws.show(sid)).memory == {}
    with pytest.raises(ValueError):
        limits.canonical(float("nan"))  # what memory stores can never be NaN


async def test_a_memory_value_is_at_most_one_mebibyte_of_json(ws):
    sid = (await ws.spawn("s", "a")).sid
    fits = "x" * (limits.JSON_VALUE_MAX - 2)  # the quotes make it exactly the limit
    await ws.memory_set(sid, "fits", fits)
    assert await ws.memory_get(sid, "fits") == fits
    with pytest.raises(ProcessionError, match="the limit is 1 MiB") as caught:
        await ws.memory_set(sid, "over", fits + "é")
    assert "memory key 'over'" in str(caught.value)
    with pytest.raises(ProcessionError, match="the limit is 1 MiB"):
        await ws.memory_set(sid, "over", ["y" * 1000] * 1100)


async def test_an_integer_beyond_64_bits_round_trips_exactly(ws, cli, tmp_path):
    sid = (await ws.spawn("s", "a")).sid
    await ws.memory_set(sid, "k", BIG)
    await ws.memory_set(sid, "nested", {"n": [-BIG, BIG + 1]})
    assert await ws.memory_get(sid, "k") == BIG
    assert cli("memory", str(sid), "get", "k").stdout == f"{BIG}\n"
    assert cli.json("memory", str(sid), "get", "nested") == {"n": [-BIG, BIG + 1]}
    cli("memory", str(sid), "set", "typed", str(BIG))
    assert cli.json("memory", str(sid), "get", "typed") == BIG
    file = tmp_path / "big.json"
    cli("save", str(sid), "-o", str(file))
    loaded = int(cli("load", str(file)).stdout)
    assert cli.json("show", str(loaded))["memory"] == {"k": BIG, "nested": {"n": [-BIG, BIG + 1]}, "typed": BIG}


def test_a_snapshot_with_a_5000_digit_integer_is_refused_in_one_line(cli, db, tmp_path):
    cli("spawn", "bystander", "--agent", "a")
    before = dump(db)
    file = tmp_path / "big.json"
    file.write_bytes(raw_snapshot(payload('{"k": ' + "9" * 5000 + "}")))
    assert "integer longer than" in refused(cli("load", str(file), check=False))
    assert "integer longer than" in refused(cli("memory", "1", "set", "k", "9" * 5000, check=False))
    assert dump(db) == before


@pytest.mark.parametrize("memory, says", [
    ('{"k": NaN}', "NaN"), ('{"k": -Infinity}', "Infinity"), ('{"k": 1e999}', "infinite"),
    ('{"k": ' + deep(65) + "}", "memory key 'k' is nested deeper than 64 levels"),
    ('{"k": ' + deep(200) + "}", "it nests a value deeper than 64 levels"),
    ('{"k": ' + deep(100_000) + "}", "it nests a value deeper than 64 levels"),
    ('{"k": "' + "x" * (1 << 20) + '"}', "the limit is 1 MiB"),
], ids=["nan", "infinity", "overflow", "65-deep", "200-deep", "100000-deep", "1MiB"])
def test_snapshot_payloads_are_checked_like_any_value(cli, db, tmp_path, memory, says):
    cli("spawn", "bystander", "--agent", "a")
    before = dump(db)
    file = tmp_path / "bad.json"
    file.write_bytes(raw_snapshot(payload(memory)))
    assert says in refused(cli("load", str(file), check=False))
    assert dump(db) == before


async def test_a_correctly_hashed_snapshot_with_a_deep_value_is_refused(ws, tmp_path):
    """The hash is no licence: a value too deep to store is refused even from an intact file."""
    for depth, says in ((65, "memory key 'k' is nested deeper than 64"), (100, "nests a value deeper than 64")):
        file = tmp_path / "deep.json"
        file.write_bytes(raw_snapshot(payload('{"k": ' + deep(depth) + "}")))
        assert json.loads(file.read_bytes())["sha256"] != "0" * 64
        with pytest.raises(ProcessionError, match=says):
            await ws.load(str(file))


def test_transcripts_too_deep_to_parse_are_refused_in_one_line(cli, db, tmp_path):
    """A line nested past Python's recursion limit used to escape as a RecursionError."""
    cli("spawn", "s", "--agent", "a")
    before = dump(db)
    transcript = tmp_path / "deep.jsonl"
    transcript.write_text('{"role": "user", "content": "x", "extra": ' + deep(100_000) + "}\n")
    assert "line 1 is nested deeper" in refused(cli("send", "1", "--jsonl", str(transcript), check=False))
    assert dump(db) == before


async def test_send_many_refuses_a_message_nested_too_deep(ws):
    sid = (await ws.spawn("s", "a")).sid
    with pytest.raises(ProcessionError, match="message 2 is nested deeper than 64"):
        await ws.send_many(sid, [{"role": "user", "content": "ok"},
                                 {"role": "user", "content": "x", "extra": json.loads(deep(100))}])
    with pytest.raises(ProcessionError, match="message 1 holds nan"):
        await ws.send_many(sid, [{"role": "user", "content": "ok", "score": float("nan")}])
    assert await ws.history(sid) == []


async def test_merge_values_are_checked_and_stored_canonical(ws):
    base = (await ws.spawn("base", "a")).sid
    await ws.memory_set(base, "k", 0)
    fork = (await ws.fork(base)).sid
    await ws.memory_set(base, "k", 1)
    await ws.memory_set(fork, "k", 2)
    for text, says in (("NaN", "NaN"), (deep(65), "nested deeper than 64"), ("[1,", "is not JSON"),
                       (json.dumps("x" * (1 << 20)), "the limit is 1 MiB")):
        with pytest.raises(ProcessionError, match=says):
            await ws.merge(fork, base, Resolution(values={"k": text}))
    await ws.merge(fork, base, Resolution(values={"k": ' { "b" : 1 , "a" : [ 2 ] } '}))
    assert await ws.memory_get(base, "k") == {"a": [2], "b": 1}
    async with ws.store.snapshot() as tx:
        assert await tx.value("SELECT value FROM memory WHERE session_id = ? AND key = 'k' ORDER BY rev DESC LIMIT 1",
                              (base,)) \
            == '{"a":[2],"b":1}'


def test_runner_memory_events_are_checked_like_the_memory_call(cli):
    """A runner is not trusted more than a user: a value too deep, too big or not JSON, or a
    key no user could set, is ignored and reported in the run's error; the rest applies."""
    events = [
        '{"type": "memory", "set": {"deep": ' + deep(65) + "}}",
        '{"type": "memory", "set": {"nan": NaN}}',
        '{"type": "memory", "set": {"ok": 1}}',
        '{"type": "memory", "set": {"bad\\u001b[8mkey": 1, "kept": [' + str(BIG) + "]}}",
        '{"type": "memory", "set": {"k": 1}, "x": ' + deep(100_000) + "}",
        '{"type": "memory", "set": {"deepest": ' + deep(64) + "}}",
        '{"type": "message", "content": "done"}',
    ]
    script = Path(cli.cwd) / "events.txt"
    script.write_text("\n".join(events) + "\n")
    sid = cli("spawn", "r", "--agent", "a", "--runner", f"command:cat {script}").stdout.strip()
    assert "run 1 ok" in cli("activate", sid, "--now").stdout
    assert cli.json("memory", sid, "ls") == {"ok": 1, "kept": [BIG], "deepest": json.loads(deep(64))}
    assert [m["content"] for m in cli.json("history", sid)] == ["done"]
    error = cli.json("runs", sid)[0]["error"]
    for says in ("line 1 nests a value deeper than 64", "line 2 holds NaN", "memory key must not",
                 "line 5 nests a value deeper than 64"):
        assert says in error, (says, error)


def test_a_runner_memory_value_over_one_mebibyte_is_ignored():
    reader = protocol.Reader()
    reader.feed(b'{"type": "memory", "set": {"big": "' + b"x" * (1 << 20) + b'", "small": 1}}\n')
    events = reader.close()
    assert events.memory_set == {"small": 1}
    assert events.problems == ["line 1: the value of memory key 'big' is 1,048,578 bytes of JSON; the limit is 1 MiB;"
                               " ignored"]


def test_an_event_line_is_bounded_and_nesting_never_breaks_the_reader():
    """A line past ``LINE_MAX`` is dropped as it streams (never held whole), and a line nested
    a thousand deep is a problem of its run, not an exception in the engine."""
    reader = protocol.Reader()
    reader.feed(b'{"type": "message", "content": "first"}\n{"type": "message", "content": "')
    for _ in range(protocol.LINE_MAX // (1 << 20) + 2):
        reader.feed(b"y" * (1 << 20))
        assert len(reader.partial) <= protocol.LINE_MAX
    reader.feed(b'"}\n' + b'{"type": "memory", "set": {"d": ' + b"[" * 1000 + b"]" * 1000 + b"}}\n")
    reader.feed(b'{"type": "message", "content": "last"}\n')
    events = reader.close()
    assert [c for _, c, _ in events.messages] == ["first", "last"]
    assert events.problems[0] == "line 2: longer than 16 MiB; ignored"
    assert "line 3" in events.problems[1] and "deeper than 64" in events.problems[1]


def test_a_nan_stored_before_the_limits_is_a_one_line_refusal_to_save(cli, db, tmp_path):
    """A workspace from before may hold NaN: saving it says so instead of writing a file no
    reader takes back (or a traceback)."""
    cli("spawn", "s", "--agent", "a")
    cli("memory", "1", "set", "k", "1")
    con = sqlite3.connect(db)
    with con:
        con.execute("UPDATE memory SET value = 'NaN' WHERE key = 'k'")
    con.close()
    assert "not JSON (NaN or Infinity)" in refused(cli("save", "1", "-o", str(tmp_path / "s.json"), check=False))
    assert not (tmp_path / "s.json").exists()


def test_a_transcript_line_is_read_as_json_reads_it_whatever_reads_it_fastest(tmp_path):
    """A line orjson reads (most) gives what the standard library gives: an integer past 64
    bits stays that integer, a float stays a float, the last of two equal keys wins."""
    import io

    from procession.present import parse

    lines = ['{"role": "user", "content": "x", "meta": {"id": 123456789012345678901234567890, "n": -9223372036854775809}}',
             '{"role": "user", "content": "y", "meta": {"f": 1e300, "g": -0.0, "k": 1, "k": 2}}',
             '{"role": "user", "content": "z", "created": 18446744073709551616}']
    got = list(parse.jsonl(io.StringIO("\n".join(lines) + "\n"), "t.jsonl"))
    assert got == [json.loads(line) for line in lines]
    assert [type(v) for m in got for v in (m.get("meta") or {}).values()] == [int, int, float, float, int]
    assert type(got[2]["created"]) is int
