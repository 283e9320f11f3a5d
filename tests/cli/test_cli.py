"""The ``procession`` command, run as a user runs it: a real process on a real workspace."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from conftest import dump
from procession import Workspace
from procession.model.errors import NoneDone

PS_KEYS = {"id", "name", "agent", "state", "priority", "parent", "context_tokens", "context_window", "messages",
           "triggers", "last_active"}


def refused(proc: subprocess.CompletedProcess[str], code: int = 1) -> str:
    """A refused call: one line on stderr after ``procession: error:``, no traceback.

    Nothing on stdout, except that with ``--json`` a command may report per-SID results.
    """
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    assert proc.stderr.startswith("procession: error:"), proc.stderr
    assert proc.stderr.strip().count("\n") == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    if "--json" in proc.args and proc.stdout:
        json.loads(proc.stdout)
    else:
        assert proc.stdout == ""
    return proc.stderr


def run_all(cli: Any, *commands: tuple[str, ...]) -> list[subprocess.CompletedProcess[str]]:
    """Independent commands, run side by side (each is its own process on the same workspace)."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(lambda args: cli(*args, check=False), commands))


def usage(proc: subprocess.CompletedProcess[str]) -> None:
    """A usage mistake: exit 2, the usage of the command given (not the top level's), no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "usage:" in proc.stderr and "Traceback" not in proc.stderr
    command = next((a for a in proc.args[3:] if not a.startswith("-")), None)
    if command is not None and "invalid choice" not in proc.stderr:  # a command's mistake, not a typo of one
        assert f"usage: procession {command}" in proc.stderr, proc.stderr


def spawn(cli: Any, name: str = "s", *extra: str) -> int:
    out = cli.json("spawn", name, "--agent", "hr", *extra)
    assert set(out) == {"sid", "notes", "row"}
    return int(out["sid"])


def fill(cli: Any, sid: int, n: int, tmp_path: Path) -> None:
    f = tmp_path / f"fill-{sid}-{n}.jsonl"
    f.write_text("".join(
        json.dumps({"role": "user" if i % 2 else "assistant",
                    "content": f"Message {i}. The report needs the ledger checked against the audit for item {i}. "
                               f"Please compare each figure and flag every difference you find."}) + "\n"
        for i in range(n)))
    assert cli.json("send", str(sid), "--jsonl", str(f))["count"] == n


def test_spawn_ps_show_history(cli: Any) -> None:
    sid = spawn(cli, "alpha", "--system", "You are careful.", "--goal", "audit", "--priority", "5",
                "--window", "64000")
    assert sid == 1
    assert cli("spawn", "beta", "--agent", "docs").stdout.strip() == "2"
    rows = cli.json("ps")
    assert isinstance(rows, list) and [r["sid"] for r in rows] == [1, 2]
    assert [r["id"] for r in rows] == [1, 2]  # its old name, kept for one release
    assert cli.json("show", "1")["sid"] == 1
    for r in rows:
        assert PS_KEYS <= set(r)
    a = rows[0]
    assert (a["name"], a["agent"], a["state"], a["priority"], a["parent"], a["context_window"], a["messages"],
            a["triggers"]) == ("alpha", "hr", "sleeping", 5, None, 64000, 0, [])
    assert a["context_tokens"] > 0  # the system prompt counts
    sent = cli.json("send", "1", "hello world")
    assert sent == {"sid": 1, "seq": 1, "count": 1, "notes": [], "row": sent["row"]} and sent["row"] > 0
    assert cli.json("send", "1", "a reply", "--role", "assistant", "--pin")["seq"] == 2
    assert json.loads(cli("send", "1", "-", "--json", input="from stdin\n").stdout)["seq"] == 3
    assert cli.json("send", "1", "from beta", "--from", "2")["seq"] == 4
    detail = cli.json("show", "1")
    assert PS_KEYS <= set(detail)
    assert detail["system"] == "You are careful." and detail["memory"] == {} and detail["resources"] == []
    assert [{k: c[k] for k in ("seq", "role", "content")} for c in detail["context"]] == [
        {"seq": 1, "role": "user", "content": "hello world"},
        {"seq": 2, "role": "assistant", "content": "a reply"},
        {"seq": 3, "role": "user", "content": "from stdin\n"},
        {"seq": 4, "role": "user", "content": "from beta"},
    ]
    assert all(isinstance(c["tokens"], int) and c["tokens"] > 0 for c in detail["context"])
    assert detail["context_tokens"] == (cli.json("ps")[0]["context_tokens"])
    assert detail["messages"] == 4
    hist = cli.json("history", "1")
    assert [(m["seq"], m["author"], m["pinned"]) for m in hist] == [
        (1, "user", False), (2, "user", True), (3, "user", False), (4, "session:2", False)]
    text = cli("show", "1").stdout
    assert "alpha" in text and "You are careful." in text and "hello world" in text
    table = cli("ps").stdout
    assert "SID" in table and "alpha" in table and "beta" in table


def test_ps_filters_and_all(cli: Any) -> None:
    spawn(cli, "a")
    cli("spawn", "b", "--agent", "docs")
    cli("cancel", "1")
    assert [r["sid"] for r in cli.json("ps")] == [2]
    assert [r["sid"] for r in cli.json("ps", "-a")] == [1, 2]
    assert [r["sid"] for r in cli.json("ps", "--agent", "docs")] == [2]
    assert [r["state"] for r in cli.json("ps", "--state", "terminated")] == ["terminated"]
    refused(cli("ps", "--state", "zombie", check=False))


def test_show_makes_control_characters_visible(cli: Any) -> None:
    spawn(cli)
    cli("send", "1", "\x1b[2Jwipe the screen\x07")
    out = cli("show", "1").stdout
    assert "\x1b" not in out and "\x07" not in out
    assert "\\x1b" in out
    assert cli.json("history", "1")[0]["content"] == "\x1b[2Jwipe the screen\x07"  # stored exactly


def test_send_jsonl_appends_a_transcript_in_one_transaction(cli: Any, db: Path, tmp_path: Path) -> None:
    sid = spawn(cli)
    good = tmp_path / "good.jsonl"
    good.write_text('{"role": "user", "content": "q1"}\n\n{"role": "assistant", "content": "a1", "pinned": true}\n')
    assert cli.json("send", "1", "--jsonl", str(good))["count"] == 2
    hist = cli.json("history", "1")
    assert [(m["role"], m["content"], m["pinned"]) for m in hist] == [("user", "q1", False), ("assistant", "a1", True)]
    before = dump(db)
    lines = [json.dumps({"role": "user", "content": f"line {i}"}) for i in range(50)]
    files = []
    for n, bad in enumerate(['{"role": "user", "content": ', "[1, 2]", '{"role": "alien", "content": "x"}',
                             '{"content": "no role"}', '{"role": "user", "content": 5}', "not json",
                             '{"role": "assistant", "content": "", "tool_calls": []}',  # not dropped unseen
                             '{"role": "user", "content": "x", "meta": []}',
                             '{"role": "tool", "content": "x", "meta": {"tool": "x"}}',
                             '{"role": "user", "content": "x", "created": "yesterday"}',
                             '{"role": "user", "content": "x", "created": -5}',
                             '{"role": "user", "content": "x", "pinned": "false"}',
                             '{"role": "user", "content": "x", "author": 5}']):
        f = tmp_path / f"bad{n}.jsonl"
        at = [0, 25, 50][n % 3]  # first line, middle, last line
        f.write_text("\n".join(lines[:at] + [bad] + lines[at:]) + "\n")
        files.append(f)
    latin1 = tmp_path / "latin1.jsonl"
    latin1.write_bytes(b'{"role": "user", "content": "caf\xe9"}\n')
    far = tmp_path / "far.jsonl"  # read and written a batch at a time: two batches in before the bad line
    far.write_text("".join(json.dumps({"role": "user", "content": f"m{i}"}) + "\n" for i in range(25_000)) + "[]\n")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    files += [latin1, far, empty, tmp_path / "missing.jsonl"]
    for proc in run_all(cli, *(("send", str(sid), "--jsonl", str(f)) for f in files)):
        refused(proc)
    assert dump(db) == before
    for proc in run_all(cli, ("send", "1", "text", "--jsonl", str(good)), ("send", "1")):
        usage(proc)


def test_one_sessions_history_sent_to_another_arrives_as_it_was(cli: Any, tmp_path: Path) -> None:
    from procession.model.toolcalls import tool_message

    role, content, meta = tool_message("c1", "Bash", {"command": "ls"}, "a\nb\n", False)
    first = tmp_path / "first.jsonl"
    first.write_text("\n".join(json.dumps(m) for m in [
        {"role": "user", "content": "list it", "created": 1_700_000_000.5},
        {"role": role, "content": content, "meta": meta, "author": "claude"},
        {"role": "assistant", "content": "two files", "pinned": True, "author": "claude"}]) + "\n")
    one, two = str(spawn(cli)), str(spawn(cli))
    cli("send", one, "--jsonl", str(first))
    copied = tmp_path / "copied.jsonl"
    copied.write_text("".join(json.dumps(m) + "\n" for m in cli.json("history", one)))  # seq, tokens, created...
    assert cli.json("send", two, "--jsonl", str(copied))["count"] == 3

    def kept(sid: str) -> list[tuple[Any, ...]]:
        return [(m["role"], m["content"], m["author"], m["pinned"], m["meta"], m["created"]) for m in cli.json("history", sid)]

    assert kept(two) == kept(one) and kept(one)[0][5] == 1_700_000_000.5 and kept(one)[1][4] == meta
    assert "Bash: ls -> 2 lines of output" in cli("show", two).stdout


def test_memory_verbs(cli: Any) -> None:
    spawn(cli)
    assert cli("memory", "1", "set", "plan", '{"steps": [1, 2]}').stdout == "1: set plan\n"  # says what it did
    cli("memory", "1", "set", "name", '"Ann"')
    assert cli.json("memory", "1", "get", "plan") == {"steps": [1, 2]}
    assert cli("memory", "1", "get", "name").stdout.strip() == '"Ann"'
    assert cli.json("memory", "1", "ls") == {"name": "Ann", "plan": {"steps": [1, 2]}}
    assert cli.json("memory", "1") == {"name": "Ann", "plan": {"steps": [1, 2]}}
    assert cli("memory", "1", "delete", "name").stdout == "1: deleted name\n"
    assert cli.json("show", "1")["memory"] == {"plan": {"steps": [1, 2]}}
    err = refused(cli("memory", "1", "set", "x", "not json", check=False))
    assert "JSON" in err
    refused(cli("memory", "1", "get", "absent", check=False))
    refused(cli("memory", "1", "delete", "absent", check=False))


def test_memory_load_sets_many_keys_in_one_journaled_call_or_none(cli: Any, db: Path, tmp_path: Path) -> None:
    spawn(cli)
    cli("memory", "1", "set", "kept", '"old"')
    values = {f"key{i}": {"n": i, "note": "x" * 40} for i in range(1_000)} | {"kept": "new", "é": [None, True]}
    f = tmp_path / "many.json"
    f.write_text(json.dumps(values))
    journal = len(cli.json("log"))
    assert cli("memory", "1", "load", str(f)).stdout == "1: set 1002 keys (key0, key1, key2, key3, key4 and 997 more)\n"
    assert cli.json("memory", "1") == values
    assert len(cli.json("log")) == journal + 1
    small = tmp_path / "small.json"
    small.write_text('{"a": 1, "b": "two"}')
    assert cli.json("memory", "1", "load", str(small))["set"] == ["a", "b"]
    cli("memory", "1", "load", "-", input='{"c": 3}')
    assert cli.json("memory", "1", "get", "c") == 3
    before = dump(db)
    bad = {"not json": "{", "a list": "[1, 2]", "empty": "{}", "a NaN": '{"ok": 1, "x": NaN}',
           "a bad key": json.dumps({"fine": 1, "": 2}), "too deep": '{"ok": 1, "d": ' + "[" * 100 + "]" * 100 + "}",
           "too big": json.dumps({"ok": 1, "big": "x" * (2 << 20)})}
    errors = {}
    for what, text in bad.items():
        path = tmp_path / "bad.json"
        path.write_text(text)
        errors[what] = refused(cli("memory", "1", "load", str(path), check=False))
    assert dump(db) == before
    assert "not JSON" in errors["not json"] and "one JSON object" in errors["a list"]
    assert "'big'" in errors["too big"] and "deeper than 64" in errors["too deep"] and "NaN" in errors["a NaN"]
    refused(cli("memory", "1", "load", str(tmp_path / "missing.json"), check=False))
    refused(cli("memory", "9", "load", str(small), check=False))


async def test_fork_merge_and_conflicts(cli: Any, db: Path, tmp_path: Path, ws: Workspace) -> None:
    spawn(cli, "root")
    fill(cli, 1, 6, tmp_path)
    cli("memory", "1", "set", "k", '"base"')
    child = cli.json("fork", "1", "--name", "kid")
    assert child == {"sid": 2, "parent": 1, "at": 6, "worktree": None, "branch": None, "notes": [],
                     "row": child["row"]}
    early = cli.json("fork", "1", "--at", "2")
    assert early["sid"] == 3 and early["at"] == 2
    assert len(cli.json("history", "3")) == 2
    ps = {r["sid"]: r for r in cli.json("ps")}
    assert ps[2]["parent"] == 1 and ps[2]["name"] == "kid" and ps[3]["parent"] == 1
    cli("send", "2", "child work")
    cli("memory", "2", "set", "k", '"child"')
    cli("memory", "1", "set", "k", '"parent"')
    before = dump(db)

    proc = cli("merge", "2", "1", check=False)
    assert proc.returncode == 3 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert lines[0].startswith("procession: error:") and "k" in lines[0]
    assert len(lines) == 2 and '"base"' in lines[1] and '"parent"' in lines[1] and '"child"' in lines[1]
    assert "Traceback" not in proc.stderr
    proc = cli("merge", "2", "1", "--json", check=False)
    assert proc.returncode == 3
    out = json.loads(proc.stdout)
    assert out["conflicts"] == {"k": {"base": "base", "ours": "parent", "theirs": "child"}}
    assert dump(db) == before
    said = [cli("merge", "2", "1", *how, "--dry-run").stdout.splitlines()[-1].strip() for how in
            (["--pick", "k=ours"], ["--pick", "k=theirs"], ["--set", 'k="ours"'])]
    assert said == ["memory: k settled: ours kept", "memory: k settled: theirs taken",
                    'memory: k settled: set to "ours"']  # a side is not a value that names it
    assert dump(db) == before

    procs = run_all(cli, ("merge", "2", "1", "--pick", "k=mine"), ("merge", "2", "1", "--set", "novalue"),
                    ("merge", "2", "1", "--ours", "--theirs"), ("merge", "2", "1", "--set", "k={bad"),
                    ("merge", "1", "1"), ("merge", "9", "1"))
    for proc in procs[:3]:
        usage(proc)
    for proc in procs[3:]:
        refused(proc)
    assert dump(db) == before

    result = cli.json("merge", "2", "1", "--set", 'k={"both": true}')
    assert result["source"] == 2 and result["sid"] == 1 and result["messages"] == 1
    assert result["resolved"] == {"k": {"value": {"both": True}}}
    assert cli.json("memory", "1", "get", "k") == {"both": True}
    hist = cli.json("history", "1")
    assert hist[-1]["content"] == "child work" and hist[-1]["meta"] == {"merged_from": 2, "from_seq": 7}
    shown = cli.json("show", "2")
    assert shown["state"] == "terminated" and shown["reason"] == "merged" and shown["merged_into"] == 1

    # the other resolutions (set up through the engine, settled through the CLI)
    for flags, expected in ((["--ours"], "ours"), (["--theirs"], "theirs"), (["--pick", "k=theirs"], "theirs"),
                            (["--pick", "k=ours"], "ours")):
        f = (await ws.fork(1)).sid
        await ws.memory_set(f, "k", f"theirs {flags}")
        await ws.memory_set(1, "k", f"ours {flags}")
        out = cli("merge", str(f), "1", *flags).stdout
        assert out.startswith(f"merged {f} into 1")
        assert await ws.memory_get(1, "k") == f"{expected} {flags}"


def test_save_load_checkpoint_and_snapshot(cli: Any, db: Path, tmp_path: Path) -> None:
    spawn(cli)
    fill(cli, 1, 4, tmp_path)
    cli("memory", "1", "set", "k", "1")
    cp = cli.json("save", "1", "v1")["checkpoint"]
    assert cp["name"] == "v1" and cp["seq"] == 4
    cli("send", "1", "later")
    cli("memory", "1", "set", "k", "2")
    restored = cli.json("load", "1", "v1", "--name", "back")
    assert restored["sid"] == 2 and restored["source"] == "1:v1"
    shown = cli.json("show", "2")
    assert shown["length"] == 4 and shown["memory"] == {"k": 1} and shown["name"] == "back"

    cli("trigger", "add", "1", "every", "5m")
    snap = tmp_path / "one.json"
    out = cli.json("save", "1", "-o", str(snap))
    assert out["messages"] == 5 and snap.exists()
    proc = cli("load", str(snap))
    assert proc.stdout.strip() == "3" and "approve" in proc.stderr
    assert cli.json("load", str(snap))["sid"] == 4
    shown = cli.json("show", "4")
    assert shown["armed"] is False and [t["armed"] for t in shown["triggers"]] == [False]
    assert [m["content"] for m in cli.json("history", "4")] == [m["content"] for m in cli.json("history", "1")]
    merge = cli("merge", "4", "1", check=False)  # not approved yet: not merged either
    assert merge.returncode != 0 and "is not approved" in merge.stderr
    assert len(merge.stderr.strip().splitlines()) == 1 and cli.json("show", "4")["state"] != "terminated"
    asked = cli("approve", "4", check=False)  # not on a terminal: it lists, then wants a yes
    assert asked.returncode == 1 and "runner builtin:digest" in asked.stderr and "trigger every 5m" in asked.stderr
    assert "--yes" in asked.stderr.splitlines()[-1]
    assert [a["sid"] for a in cli.json("approve", "4", "--yes")] == [4]
    assert [t["armed"] for t in cli.json("trigger", "ls", "4")] == [True]

    before = dump(db)
    doc = json.loads(snap.read_text())
    doc["payload"]["memory"]["k"] = 999  # tampered, hash kept
    bad = tmp_path / "tampered.json"
    bad.write_text(json.dumps(doc))
    trunc = tmp_path / "trunc.json"
    trunc.write_bytes(snap.read_bytes()[:100])
    procs = run_all(cli, ("load", str(bad)), ("load", str(trunc)), ("load", str(tmp_path / "none.json")),
                    ("approve", "4"), ("load", "1", "nope"), ("save", "1", "v1"),
                    ("save", "1", "name", "-o", str(snap)), ("save", "1"), ("load", str(snap), "--name", "x"),
                    ("load", "abc", "v1"))
    assert "hash" in refused(procs[0])
    for proc in procs[1:6]:
        refused(proc)
    for proc in procs[6:]:
        usage(proc)
    assert dump(db) == before


def test_compress_expand_migrate(cli: Any, db: Path, tmp_path: Path) -> None:
    spawn(cli, "c", "--system", "sys")
    fill(cli, 1, 20, tmp_path)
    full = cli.json("show", "1")
    fold = cli.json("compress", "1", "--keep-last", "3")["fold"]
    assert fold["archived_count"] == 17 and fold["summary_tokens"] < fold["archived_tokens"]
    shown = cli.json("show", "1")
    assert shown["messages"] == 4 and shown["context"][0]["summary_of"]["messages"] == 17
    assert shown["context_tokens"] < full["context_tokens"]
    expanded = cli.json("expand", "1")
    assert expanded["fold"]["id"] == fold["id"] and (expanded["undone"], expanded["in_force"]) == (1, 0)
    assert cli.json("show", "1")["context"] == full["context"]
    refused(cli("expand", "1", check=False))
    usage(cli("compress", "1", "--keep-last", "many", check=False))
    refused(cli("compress", "1", "--keep-last", "-1", check=False))

    tokens = full["context_tokens"]
    before = dump(db)
    err = refused(cli("migrate", "1", "--runner", "openai:small", "--window", str(tokens - 1), check=False))
    assert str(tokens) in err
    assert dump(db) == before
    out = cli.json("migrate", "1", "--runner", "openai:small", "--window", str(tokens // 2), "--compress")
    assert out["fold"] is not None and out["context_tokens"] <= tokens // 2
    ps = cli.json("ps")[0]
    assert ps["context_window"] == tokens // 2 and ps["context_tokens"] == out["context_tokens"]
    refused(cli("migrate", "1", "--runner", "nonsense", check=False))
    usage(cli("migrate", "1", check=False))


def test_lifecycle_verbs(cli: Any) -> None:
    for name in ("a", "b", "c"):
        spawn(cli, name)
    assert [(o["sid"], o["state"]) for o in cli.json("activate", "1", "2")] == [(1, "ready"), (2, "ready")]
    assert cli("suspend", "1").stdout.strip() == "1: suspended"
    assert [(o["sid"], o["state"]) for o in cli.json("resume", "1")] == [(1, "ready")]
    assert [(o["sid"], o["state"]) for o in cli.json("interrupt", "1")] == [(1, "sleeping")]
    assert [(o["sid"], o["state"]) for o in cli.json("cancel", "3")] == [(3, "terminated")]
    err = refused(cli("suspend", "3", check=False))
    assert "terminated" in err
    refused(cli("resume", "2", check=False))
    # several SIDs, one refused: all or none, so none is done; each refusal on a line of its own
    journal = len(cli.json("log"))
    proc = cli("cancel", "1", "3", "2", check=False)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.splitlines() == ["procession: error: cannot cancel session 3: it is terminated: fork it to go on from where it ended",
                                        "procession: error: " + NoneDone.NOTHING], proc.stderr
    assert [r["state"] for r in cli.json("ps", "-a")] == ["sleeping", "ready", "terminated"]
    assert len(cli.json("log")) == journal  # nor journaled
    assert [o["state"] for o in cli.json("cancel", "1", "2", "1")] == ["terminated", "terminated"]
    usage(cli("cancel", check=False))
    usage(cli("cancel", "0", check=False))


def test_activate_with_an_unknown_sid_activates_none(cli: Any) -> None:
    """``activate 1 2 99`` once queued 1 and 2, then said "no session 99"."""
    spawn(cli)
    spawn(cli, "b")
    refused(cli("activate", "99", check=False))
    for now in ([], ["--now"]):
        proc = cli("activate", "1", "2", "99", *now, check=False)
        assert proc.returncode == 1 and proc.stderr.splitlines()[0] == "procession: error: no session 99", proc.stderr
        assert "Traceback" not in proc.stderr
        assert [r["state"] for r in cli.json("ps")] == ["sleeping", "sleeping"]


def test_nice_bind_trigger_log(cli: Any, tmp_path: Path) -> None:
    spawn(cli)
    spawn(cli, "other")
    assert cli.json("nice", "1", "10")["priority"] == 10
    assert cli.json("nice", "1", "-3", "--relative")["priority"] == 7
    rid = cli.json("bind", "1", "file", "notes.txt", "--mode", "ro")["resource"]["id"]
    res = cli.json("show", "1")["resources"]
    assert res == [{"id": rid, "kind": "file", "uri": str(tmp_path / "notes.txt"), "mode": "ro"}]
    procs = run_all(cli, ("nice", "1", "1000"), ("bind", "1", "file", "notes.txt"),
                    ("bind", "1", "file", "x", "--mode", "wx"))
    refused(procs[0])
    refused(procs[1])
    usage(procs[2])
    assert cli.json("unbind", "1", str(rid))["resource"]["id"] == rid
    t1 = cli.json("trigger", "add", "1", "every", "5m")["trigger"]["id"]
    t2 = cli.json("trigger", "add", "1", "after", "2")["trigger"]["id"]
    cli("trigger", "add", "1", "watch", "src/*.py", "--debounce", "200")
    trigs = cli.json("trigger", "ls", "1")
    assert [(t["id"], t["kind"], t["armed"]) for t in trigs][:2] == [(t1, "every", True), (t2, "after", True)]
    assert trigs[2]["spec"] == {"paths": [str(tmp_path / "src/*.py")], "debounce_ms": 200}
    assert cli.json("trigger", "rm", "1", str(t1))["trigger"]["id"] == t1
    procs = run_all(cli, ("trigger", "rm", "1", str(t1)), ("trigger", "add", "1", "every", "never"),
                    ("trigger", "add", "1", "after", "1"), ("unbind", "1", str(rid)), ("trigger",))
    for proc in procs[:4]:
        refused(proc)
    usage(procs[4])
    log = cli.json("log")
    assert [e["call"] for e in log] == ["spawn", "spawn", "nice", "nice", "bind", "unbind", "trigger", "trigger",
                                        "trigger", "trigger"]
    assert all(e["actor"] == "cli" for e in log)
    assert {"id", "ts", "actor", "call", "session", "other", "args", "outcome"} <= set(log[0])
    assert [e["call"] for e in cli.json("log", "2")] == ["spawn"]
    assert len(cli.json("log", "-n", "3")) == 3
    assert "spawn" in cli("log").stdout


def test_refused_calls_print_one_line_and_change_nothing(cli: Any, db: Path) -> None:
    spawn(cli)
    cli("cancel", "1")
    before = dump(db)
    commands = [("suspend", "1"), ("send", "1", "x"), ("fork", "42"), ("show", "42"), ("history", "42"),
                ("merge", "1", "1"), ("send", "1", "x", "--role", "wizard"), ("spawn", "x", "--agent", "hr",
                "--runner", "bogus"), ("spawn", "x", "--agent", "hr", "--window", "0"), ("compress", "1"),
                ("memory", "42", "ls"), ("fork", "1", "--at", "5")]
    commands += [(*c, "--json") for c in commands[:6]]
    for proc in run_all(cli, *commands):
        refused(proc)
    assert dump(db) == before


def test_usage_mistakes_exit_2(cli: Any) -> None:
    commands = [("nosuch",), ("show",), ("show", "abc"), ("show", "-1"), ("spawn", "x"), ("fork", "1", "--at", "x"),
                ("send",), ("memory", "1", "set", "k"), ("merge", "1"), ("nice", "1", "high"), ("ps", "--bogus")]
    for proc in run_all(cli, *commands):
        usage(proc)


def test_db_option_and_bad_workspace_files(cli: Any, tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    assert cli.json("spawn", "x", "--agent", "hr", "--db", str(other))["sid"] == 1
    assert cli.json("ps", "--db", str(other))[0]["name"] == "x"
    assert "no workspace at" in refused(cli("ps", check=False))  # a typo'd path is not made into a workspace
    assert not cli.db.exists()
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    err = refused(cli("ps", "--db", str(notes), check=False))
    assert "not" in err
    assert notes.read_text() == "my notes\n"
    newer = tmp_path / "newer.db"
    cli("spawn", "y", "--agent", "hr", "--db", str(newer))
    con = sqlite3.connect(newer)
    con.execute("PRAGMA user_version = 99")
    con.commit()
    con.close()
    content = newer.read_bytes()
    refused(cli("ps", "--db", str(newer), check=False))
    assert newer.read_bytes() == content


def test_foreign_sqlite_file_is_a_one_line_error(cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE meta (k TEXT)")
    con.commit()
    con.close()
    refused(cli("ps", "--db", str(path), check=False))


def test_ps_does_not_import_textual_nor_the_engine(db: Path, tmp_path: Path, cli: Any) -> None:
    """What a command does not use is not imported: the monitor, the engine and its runners,
    an HTTP client (what start-up costs, beside the interpreter and asyncio)."""
    cli("spawn", "s", "--agent", "a")
    env = {**os.environ, "PROCESSION_DB": str(db)}
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "procession", "ps"], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    imported = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if "|" in line]
    assert "procession.cli" in imported  # the check sees what the command imports
    assert not [m for m in imported if m.split(".")[0] in ("textual", "http", "email")
                or m.startswith(("procession.tui", "procession.engine", "urllib.request"))]



def test_paths_are_read_against_the_shell_folder(cli: Any, tmp_path: Path) -> None:
    """Like every shell command: `bind 1 folder .` and `watch rates.csv` mean here, not the
    session's folder; a path with nothing there yet is accepted with a note."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    sid = str(spawn(cli, "s", "--cwd", str(elsewhere)))
    (tmp_path / "rates.csv").write_text("a,b\n")
    bound = cli("bind", sid, "folder", ".")
    assert bound.stderr == ""
    watched = cli("trigger", "add", sid, "watch", "rates.csv", "later.csv")
    assert watched.stderr.strip() == f"procession: note: {tmp_path / 'later.csv'} does not exist (yet)"
    shown = cli.json("show", sid)
    assert [r["uri"] for r in shown["resources"]] == [str(tmp_path)]
    assert shown["triggers"][0]["spec"]["paths"] == [str(tmp_path / "rates.csv"), str(tmp_path / "later.csv")]
    missing = cli("spawn", "x", "--agent", "a", "--cwd", str(tmp_path / "nope"), check=False)
    assert missing.returncode == 1 and "does not exist" in missing.stderr


def test_every_call_of_the_table_has_a_command_of_its_name() -> None:
    from procession.cli.registry import COMMANDS
    from procession.model.calls import INFO, USER_CALLS

    made = {c.call for c in COMMANDS.values() if c.call is not None}
    assert made == set(USER_CALLS)
    for call in USER_CALLS:
        assert COMMANDS[call.value].help == INFO[call].summary or COMMANDS[call.value].call is call


def test_the_monitor_without_a_terminal_says_so(cli: Any) -> None:
    spawn(cli)
    proc = cli(check=False)  # stdin and stdout are pipes here
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().startswith("procession: the monitor needs a terminal") and "Traceback" not in proc.stderr


def test_the_monitor_is_given_engine_only_when_asked_and_never_read_only(monkeypatch: pytest.MonkeyPatch,
                                                                         cli: Any) -> None:
    """Unsaid, the monitor decides by the workspace's kind (tests/tui/test_tui_shared_engine.py);
    ``--engine`` asks for one, which a read-only monitor cannot run: a usage mistake."""
    from procession.cli import main, monitor
    from procession.tui import app

    opened: list[dict[str, Any]] = []

    async def run_monitor(db: Path | str, **options: Any) -> int:
        opened.append(options)
        return 0

    monkeypatch.setattr(monitor, "needs_terminal", lambda: None)
    monkeypatch.setattr(app, "run_monitor", run_monitor)
    url = "postgresql://procession@db/procession"  # never opened: the monitor opens it
    assert main(["--db", url]) == 0 and main(["--engine", "--db", url]) == 0
    assert [o["engine"] for o in opened] == [None, True]
    usage(cli("--engine", "--readonly", check=False))


def test_set_changes_settings_after_spawn(cli: Any, tmp_path: Path) -> None:
    spawn(cli, "draft", "--window", "1000")
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("You write short answers.\n")
    out = cli.json("set", "1", "--name", "final", "--goal", "ship", "--system-file", str(prompt), "--timeout", "30")
    assert out["changed"] == ["name", "goal", "system", "timeout"]
    shown = cli.json("show", "1")
    assert (shown["name"], shown["goal"], shown["system"], shown["timeout"]) == (
        "final", "ship", "You write short answers.\n", 30)
    assert shown["context_tokens"] > 0  # the new system prompt is counted
    assert cli("set", "1", "--timeout", "0").stdout.strip() == "1: changed timeout"
    assert cli.json("show", "1")["timeout"] is None
    refused(cli("set", "1", check=False))  # nothing to change
    refused(cli("set", "1", "--window", "5", check=False))  # the context would not fit
    refused(cli("set", "1", "--name", "", check=False))
    usage(cli("set", "1", "--system", "a", "--system-file", str(prompt), check=False))
    assert [e["call"] for e in cli.json("log", "1")].count("set") == 2
    # every setting given is reported, in one call (the sampling ones were once reported apart, or not at all)
    said = cli("set", "1", "--name", "n2", "--max-turns", "5", "--temperature", "0.3", "--max-tokens", "40",
               "--request", "top_p=0.9", "--tokenizer", "none").stdout.strip()
    assert said == "1: changed name, max_turns, temperature, max_tokens, request"  # none: the counter it had
    shown = cli.json("show", "1")
    assert "they are kept, and apply once it is migrated to an openai: model" in cli(
        "set", "1", "--max-turns", "6").stderr  # this session's runner is not openai's: said
    assert shown["name"] == "n2" and shown["env"]["PROCESSION_MAX_TURNS"] == "5"
    assert json.loads(shown["env"]["PROCESSION_SAMPLING"]) == {"max_tokens": 40, "temperature": 0.3, "top_p": 0.9}
    before = dump(cli.db)
    refused(cli("set", "1", "--name", "n3", "--temperature", "9", check=False))  # one refused: none changed
    assert dump(cli.db) == before
    assert [e["call"] for e in cli.json("log", "1")].count("set") == 4


def test_history_prints_whole_messages_and_short_clips_them(cli: Any) -> None:
    spawn(cli)
    long = "first line\n" + "word " * 60 + "END"
    cli("send", "1", long)
    whole = cli("history", "1").stdout
    assert "END" in whole and "first line" in whole and "\n" in whole.strip()
    short = cli("history", "1", "--short").stdout.strip()
    assert "END" not in short and short.endswith("…") and "\n" not in short


def test_trigger_ids_are_never_reused_and_a_second_identical_trigger_is_refused(cli: Any) -> None:
    spawn(cli)
    first = cli.json("trigger", "add", "1", "every", "5m")["trigger"]["id"]
    refused(cli("trigger", "add", "1", "every", "5m", check=False))
    cli("trigger", "rm", "1", str(first))
    second = cli.json("trigger", "add", "1", "every", "5m")["trigger"]["id"]
    assert second > first


def test_show_last_history_pages_and_wait(cli: Any) -> None:
    sid = spawn(cli)
    cli("send", str(sid), "--jsonl", "-", input="".join(json.dumps({"role": "user", "content": f"m{n}"}) + "\n"
                                                        for n in range(1, 8)))
    assert [c["content"] for c in cli.json("show", str(sid), "--last", "2")["context"]] == ["m6", "m7"]
    assert [m["seq"] for m in cli.json("history", str(sid), "--after", "3", "--limit", "2")] == [4, 5]
    assert [m["seq"] for m in cli.json("history", str(sid), "--after", "6")] == [7]
    timed_out = cli("wait", str(sid), "--timeout", "0.05", "--json", check=False)
    assert timed_out.returncode == 124
    assert json.loads(timed_out.stdout) | {"row": 0} == {"sid": sid, "woke": "timeout", "state": "sleeping", "run": None,
                                                         "messages": [], "row": 0}
    cli("cancel", str(sid))
    assert cli("wait", str(sid)).stdout == f"{sid}: it is terminated\n"
    refused(cli("wait", str(sid), "--timeout", "-1", check=False))


def test_a_refused_spawn_on_a_new_path_leaves_no_workspace_behind(cli, tmp_path):
    target = tmp_path / "new.db"
    refused = cli("--db", str(target), "spawn", "x", "--agent", "a", "--runner", "claude:a b", check=False)
    assert refused.returncode == 1 and len(refused.stderr.strip().splitlines()) == 1
    assert not list(tmp_path.glob("new.db*"))  # nothing accepted, nothing made
    cli("--db", str(target), "spawn", "x", "--agent", "a")
    assert target.exists()


@pytest.mark.parametrize("cli_name, kept", [("claude", ".claude/projects"), ("codex", ".codex/sessions"),
                                            ("opencode", ".local/share/opencode/opencode.db")])
def test_adopt_all_where_there_is_nothing_says_where_it_looked(cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               cli_name: str, kept: str) -> None:
    for var in ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "XDG_DATA_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    title = {"claude": "Claude Code", "codex": "Codex CLI", "opencode": "opencode"}[cli_name]
    assert cli("adopt", cli_name, "--all").stdout == (
        f"nothing to adopt in {tmp_path}/home/{kept} (where {title} keeps its sessions here)\n")
    assert json.loads(cli("adopt", cli_name, "--all", "--json").stdout)["looked"] == f"{tmp_path}/home/{kept}"


def test_after_the_demo_a_command_on_no_workspace_names_the_demos(tmp_path: Path) -> None:
    """``procession demo`` then ``procession ps`` said only "no workspace at …/workspace.db"."""
    env = {k: v for k, v in os.environ.items() if k != "PROCESSION_DB"} | {"XDG_DATA_HOME": str(tmp_path / "data")}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "procession", *args], capture_output=True, text=True, env=env,
                              cwd=tmp_path, timeout=120)

    assert run("ps").stderr.strip().endswith("(a spawn or a load makes one)")  # no demo yet: nothing more
    assert run("demo", "--no-monitor").returncode == 0
    proc = run("ps")
    demo = tmp_path / "data" / "procession" / "demo.db"
    assert proc.returncode == 1 and proc.stderr.strip().endswith(f"the demo's is {demo}: give --db {demo}, or set"
                                                                 " PROCESSION_DB to it"), proc.stderr
    assert run("ps", "--db", str(demo)).returncode == 0


async def test_a_second_demo_has_a_workspace_and_a_model_of_its_own(tmp_path: Path) -> None:
    """A second ``procession demo`` pointed the first one's model session at its own model
    server, and broke it when it quit (issue 35). While a demo serves its workspace (here:
    this test holds it, as a running demo does), another demo builds and serves one of its own;
    one named with --db is refused; the model session of each points at its own model."""
    from procession.cli import demo

    env = {k: v for k, v in os.environ.items() if k != "PROCESSION_DB"} | {"XDG_DATA_HOME": str(tmp_path / "data")}
    first = tmp_path / "data" / "procession" / "demo.db"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "procession", "demo", "--no-monitor", "--json", *args],
                              capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)

    with demo.own(first, named=False) as held:
        assert held == first
        await demo.build(first)
        serving = await demo.with_model(first, "http://127.0.0.1:1/v1")
        second = json.loads(run().stdout)
        assert second["db"] == str(first.with_name("demo-2.db"))
        assert second["folder"] == str(first.with_name("demo-2-files"))
        assert refused(run("--db", str(first))).strip().endswith(f"another procession demo serves {first}: give"
                                                                 " another --db")
        await demo.with_model(Path(second["db"]), "http://127.0.0.1:2/v1")
    async with await Workspace.open(first) as ws:
        assert (await ws.info(serving)).runner.endswith("@http://127.0.0.1:1/v1")
    assert json.loads(run().stdout)["db"] == str(first)  # served by none now: the first again


def test_activate_over_a_budget_says_it_will_not_run_until_the_budget_is_raised(cli: Any) -> None:
    """``ready`` alone promised a run the engine then held back (issue 35): the call's result
    says why it will not run and how to see the budget; a cap of 0 is shown as reached."""
    sid = spawn(cli)
    other = spawn(cli, "t")
    assert "runs 0 of 0 (reached)" in cli("limit", str(sid), "--runs", "0", "--per", "total").stdout
    proc = cli("activate", str(sid))
    assert proc.stdout.startswith(f"{sid}: ready")
    assert (f"procession: note: it is over its session budget: runs 0 of 0 in total: it will not run until that"
            f" budget is raised or cleared (`procession limit {sid}`)") in proc.stderr.splitlines(), proc.stderr
    [outcome] = cli.json("activate", str(other))
    assert not any("budget" in n["text"] for n in outcome["notes"])


def test_agents_lists_each_agent_cli_where_it_is_installed_and_how_to_install_the_rest(
        cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("gemini", "opencode"):
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    for name in ("CLAUDE", "CODEX", "OPENCODE", "GEMINI", "QWEN", "COPILOT"):
        monkeypatch.delenv(f"PROCESSION_{name}", raising=False)
        monkeypatch.delenv(f"PROCESSION_{name}_ACP", raising=False)
    found = {a["kind"]: a for a in cli.json("agents")}  # type: ignore[union-attr]
    assert found["gemini"]["program"] == str(bin_dir / "gemini") and found["gemini"]["runners"] == ["acp:gemini"]
    assert found["opencode"]["runners"] == ["opencode:", "acp:opencode"] and found["opencode"]["install"] is None
    assert found["claude"]["install"] == "npm install -g @anthropic-ai/claude-code @agentclientprotocol/claude-agent-acp"
    text = cli("agents").stdout
    assert f"Gemini CLI (acp:gemini): at {bin_dir / 'gemini'}" in text
    assert "Qwen Code (acp:qwen): install: npm install -g @qwen-code/qwen-code" in text
