"""Hostile or broken input: fuzzed snapshots, control characters, huge texts and numbers,
secrets, file permissions. Nothing may crash, hang, leak or half-apply."""

from __future__ import annotations

import asyncio
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from conftest import dump as store_dump
from procession import ProcessionError, SnapshotError, Workspace
from procession.present.words import printable
from procession.model.snapshot import canonical_bytes, dump
from procession.model.trigger_spec import revalidate

async def make_snapshot(db: Path, out: Path) -> dict:
    ws = await Workspace.open(db)
    sid = (await ws.spawn("source", "fuzz", system="sys prompt", runner="command:echo hi")).sid
    for i in range(12):
        await ws.send(sid, f"message {i}: some words about payroll and rates", pin=(i == 3))
    await ws.memory_set(sid, "k", {"nested": [1, 2, 3]})
    await ws.bind(sid, "folder", "/srv/data", mode="ro")
    await ws.trigger_add(sid, "cron", ["0 9 1 * *"])
    await ws.trigger_add(sid, "watch", ["/srv/data/**/*.csv"], debounce_ms=100)
    await ws.compress(sid, keep_last=4)
    await ws.save(sid, file=str(out))
    await ws.close()
    return json.loads(out.read_bytes())


def payload_of(ws_export: dict) -> dict:
    """What must survive a load: all but the identity and birth of the session, with trigger
    specs in the normal form a load brings them to (paths absolute, durations recomputed)."""
    p = json.loads(json.dumps(ws_export["payload"]))
    p["session"].pop("uuid")
    p["session"].pop("created")
    p["triggers"] = [{"kind": t["kind"], "spec": revalidate(t["kind"], t["spec"])} for t in p["triggers"]]
    s = p["session"]  # what a file may leave out (older files lack it), as a load fills it in
    s.setdefault("env", {})
    s.setdefault("passed", [])
    s.setdefault("confine", "bound")  # how the kernel holds its runs: a file from before bounds had none
    s.setdefault("net", "any")
    s.setdefault("permissions", "bound")  # and before permissions
    if not (isinstance(s.get("cwd"), str) and os.path.isdir(s["cwd"])):  # a folder not stated, or not here:
        s["cwd"] = os.getcwd()  # the load works where it was made
    ref = s.setdefault("agent_ref", None)
    if ref is None:
        s["agent_seen"] = 0
    else:
        ref.pop("fork", None)  # a loaded copy forks the agent's session: marked so on the way in
        s.setdefault("agent_seen", 0)
    return p


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fuzz")
    snap = folder / "source.json"
    doc = asyncio.run(make_snapshot(folder / "source.db", snap))
    return snap.read_bytes(), doc


def _mutate_json(doc: dict, data: st.DataObject) -> dict:
    """Change one value somewhere in the payload to something of another kind."""
    doc = json.loads(json.dumps(doc))
    node = doc["payload"]
    path = []
    while isinstance(node, (dict, list)) and node:
        keys = list(node.keys()) if isinstance(node, dict) else list(range(len(node)))
        key = data.draw(st.sampled_from(keys))
        path.append(key)
        if not isinstance(node[key], (dict, list)) or not node[key] or data.draw(st.booleans()):  # not into an empty one
            break
        node = node[key]
    value = data.draw(st.one_of(
        st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True), st.text(max_size=20),
        st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
    ))
    if isinstance(node, dict) and data.draw(st.booleans()) and path:
        node.pop(path[-1], None)
    else:
        node[path[-1]] = value
    return doc


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(data=st.data())
def test_fuzzed_snapshots_load_exactly_or_are_refused_leaving_the_store_unchanged(tmp_path, source, data):
    raw, doc = source
    kind = data.draw(st.sampled_from(["bytes", "truncate", "json-rehashed", "json-stale-hash"]))
    if kind == "bytes":
        blob = bytearray(raw)
        for _ in range(data.draw(st.integers(1, 8))):
            blob[data.draw(st.integers(0, len(blob) - 1))] = data.draw(st.integers(0, 255))
        mutated = bytes(blob)
    elif kind == "truncate":
        mutated = raw[: data.draw(st.integers(0, len(raw) - 1))]
    else:
        changed = _mutate_json(doc, data)
        if kind == "json-rehashed" and isinstance(changed.get("payload"), dict):
            try:
                mutated = dump(changed["payload"])
            except SnapshotError:  # a value no snapshot can hold (NaN, infinity): written by hand instead
                mutated = json.dumps(changed).encode()
        elif kind == "json-rehashed":
            mutated = json.dumps(changed).encode()
        else:
            mutated = json.dumps(changed).encode()
    db = tmp_path / f"target-{data.draw(st.integers(0, 10**9))}.db"
    file = tmp_path / "mutated.json"
    file.write_bytes(mutated)

    async def attempt() -> tuple[int | None, str | None]:
        ws = await Workspace.open(db)
        await ws.spawn("bystander", "other")
        await ws.close()
        before = store_dump(db)
        ws = await Workspace.open(db)
        try:
            sid = (await asyncio.wait_for(ws.load(str(file)), 10)).sid
        except ProcessionError as exc:
            await ws.close()
            assert store_dump(db) == before, "a refused load changed the store"
            return None, str(exc)
        out = tmp_path / "roundtrip.json"
        await ws.save(sid, file=str(out), replace=True)
        await ws.close()
        return sid, out.read_text()

    sid, result = asyncio.run(attempt())
    event(f"{kind}: {'refused' if sid is None else 'loaded'}")
    if sid is None:
        assert result and "\n" not in result and "Traceback" not in result
        return
    # accepted: it must be exactly what the file holds (tokens are recounted, never trusted)
    loaded, sent = payload_of(json.loads(result)), payload_of(json.loads(mutated))
    for fold, given in zip(loaded.get("folds") or [], sent.get("folds") or []):
        if isinstance(given, dict) and "created" not in given:  # a fold from a file that left it out: stamped
            fold.pop("created", None)
    assert loaded == sent


async def test_loaded_sessions_are_disarmed_until_approved(tmp_path, source):
    raw, _ = source
    file = tmp_path / "s.json"
    file.write_bytes(raw)
    ws = await Workspace.open(tmp_path / "ws.db")
    sid = (await ws.load(str(file))).sid
    info = await ws.info(sid)
    assert not info.armed and all(not t.armed for t in info.triggers)
    with pytest.raises(ProcessionError, match="not approved"):
        await ws.activate(sid)
    await ws.approve(sid)
    info = await ws.info(sid)
    assert info.armed and all(t.armed for t in info.triggers)
    await ws.close()


async def test_names_with_control_characters_are_refused_texts_are_kept_exactly(ws):
    with pytest.raises(ProcessionError, match="control characters"):
        await ws.spawn("evil\x1b]0;pwned\x07", "a")
    with pytest.raises(ProcessionError, match="control characters"):
        await ws.spawn("ok", "agent\nnewline")
    sid = (await ws.spawn("ok", "a")).sid
    with pytest.raises(ProcessionError, match="not valid Unicode"):
        await ws.send(sid, "invalid bytes from argv \udcff")
    text = "clear screen \x1b[2J bell \x07 nul \x00 csi \x9b31m end"
    await ws.send(sid, text)
    assert (await ws.history(sid))[0].content == text
    shown = printable(text)
    assert "\x1b" not in shown and "\x07" not in shown and "\x00" not in shown and "\x9b" not in shown
    assert "\\x1b[2J" in shown


@given(st.text(alphabet=st.sampled_from("a \t\n\r\x00\x1b\x07\x7f\x85\x9b\u00e9\u2028"), max_size=40),
       st.booleans())
def test_printable_shows_every_control_character_but_newlines_and_tabs_whatever_its_fast_paths(text, lines):
    """The checks in C that pass common text whole (printable, or ASCII with newlines and
    tabs) say what the pattern says: every other control character, C1 ones included, is shown
    as an escape, newlines and tabs stay unless ``lines`` is off."""
    unsafe = "[\x00-\x08\x0b-\x1f\x7f-\x9f]" if lines else "[\x00-\x1f\x7f-\x9f]"
    assert printable(text, lines=lines) == re.sub(unsafe, lambda m: f"\\x{ord(m.group()):02x}", text)


async def test_a_ten_megabyte_message_is_stored_faithfully(ws):
    sid = (await ws.spawn("big", "a")).sid
    text = ("0123456789abcdef" * 65536) * 10  # 10 MiB
    await ws.send(sid, text)
    got = (await ws.history(sid))[0]
    assert got.content == text and got.tokens > 2_000_000
    assert (await ws.info(sid)).context_tokens == got.tokens


def test_cli_numbers_out_of_range_are_one_line_errors(cli):
    cli("spawn", "s", "--agent", "a")
    for args in (["show", "99999999999999999999"], ["nice", "1", "99999999999999999999"],
                 ["spawn", "x", "--agent", "a", "--window", "99999999999999999999"],
                 ["spawn", "x", "--agent", "a", "--priority", "-1000"], ["fork", "1", "--at", "-1"],
                 ["trigger", "add", "1", "every", "99999999999999999999d"], ["unbind", "1", "99999999999999999999"],
                 ["log", "-n", "-5"], ["compress", "1", "--keep-last", "-1"]):
        out = cli(*args, check=False)
        assert out.returncode in (1, 2), args
        assert "Traceback" not in out.stderr and out.stderr.strip().count("\n") <= (0 if out.returncode == 1 else 2)


def test_runner_output_with_invalid_utf8_is_kept_readable(tmp_path, cli):
    db = tmp_path / "ws.db"
    sid = cli("spawn", "bytes", "--agent", "a", "--runner", r"command:printf 'ok \377\376 bad bytes\n'").stdout.strip()
    out = cli("activate", sid, "--now")
    assert "run 1 ok" in out.stdout
    content = cli.json("history", sid)[0]["content"]
    assert content.startswith("ok ") and content.endswith("bad bytes") and "\ufffd" in content
    assert db.exists()


def test_workspace_and_exports_are_private_and_hold_no_secret(tmp_path, cli, monkeypatch):
    secret = "sk-live-do-not-store-7f3a"
    cli("spawn", "s", "--agent", "a", "--runner", "openai:gpt@http://127.0.0.1:9#MY_KEY")
    cli("send", "1", "hello")
    env_cli = subprocess.run([sys.executable, "-m", "procession", "activate", "1", "--now"], capture_output=True,
                             text=True, env={**os.environ, "PROCESSION_DB": str(cli.db), "MY_KEY": secret})
    assert "failed" in env_cli.stdout  # nothing listens on port 9; the key was read, used, not kept
    snap = tmp_path / "out.json"
    cli("save", "1", "-o", str(snap))
    for path in (cli.db, snap, *cli.db.parent.glob("ws.db-*")):
        assert secret.encode() not in path.read_bytes(), path
        if path.suffix != ".json" or path == snap:
            assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0, f"{path} is readable by others"
    assert secret not in cli("log", "-n", "100", "--json").stdout


async def test_snapshot_paths_come_back_absolute_and_the_session_cannot_run_unapproved(tmp_path, ws):
    doc = {"session": {"uuid": "u", "name": "n", "agent": "a", "goal": "", "system": "", "priority": 0,
                       "runner": "command:rm -rf ~", "window": 1000, "timeout": None, "created": 0.0},
           "messages": [], "folds": [], "memory": {}, "resources": [{"kind": "folder", "uri": "/", "mode": "rw"}],
           "triggers": [{"kind": "watch", "spec": {"paths": ["../../etc"], "debounce_ms": 1}},
                        {"kind": "every", "spec": {"text": "1s", "seconds": 1}}]}
    file = tmp_path / "hostile.json"
    file.write_bytes(dump(doc))
    sid = (await ws.load(str(file))).sid
    info = await ws.info(sid)
    assert not info.armed
    watch = next(t for t in info.triggers if t.kind == "watch")
    assert all(p.startswith("/") and ".." not in p for p in watch.spec["paths"]) and not watch.armed
    with pytest.raises(ProcessionError):
        await ws.activate(sid)


def test_snapshot_hash_covers_the_payload(source):
    raw, doc = source
    assert json.loads(raw)["sha256"] == __import__("hashlib").sha256(canonical_bytes(doc["payload"])).hexdigest()


async def test_tampered_snapshot_with_a_stale_hash_is_refused(tmp_path, source, ws):
    raw, doc = source
    doc = json.loads(raw)
    doc["payload"]["messages"][0]["content"] = "tampered"
    file = tmp_path / "t.json"
    file.write_text(json.dumps(doc))
    with pytest.raises(SnapshotError, match="does not match its content hash"):
        await ws.load(str(file))


def test_transcripts_and_runner_output_with_lone_surrogates_are_refused_cleanly(tmp_path, cli):
    """JSON can spell text that has no UTF-8 form (``\\udcff``): refused in one line from a
    transcript; skipped (and reported) from a runner's events, the rest of its output kept."""
    sid = cli("spawn", "s", "--agent", "a").stdout.strip()
    transcript = tmp_path / "t.jsonl"
    transcript.write_text('{"role": "user", "content": "fine"}\n{"role": "user", "content": "bad \\udcff"}\n')
    out = cli("send", sid, "--jsonl", str(transcript), check=False)
    assert out.returncode == 1 and out.stderr.count("\n") == 1 and "message 2" in out.stderr
    assert cli.json("history", sid) == []
    step = ("command:printf '{\"type\": \"message\", \"content\": \"kept\"}\\n"
            "{\"type\": \"message\", \"content\": \"x \\\\udcff\"}\\n{\"type\": \"memory\", \"set\": {\"k\": \"\\\\ud800\"}}\\n'")
    runner = cli("spawn", "r", "--agent", "a", "--runner", step).stdout.strip()
    assert "run 1 ok" in cli("activate", runner, "--now").stdout
    assert [m["content"] for m in cli.json("history", runner)] == ["kept"]
    assert "not valid Unicode" in cli.json("runs", runner)[0]["error"]
    assert cli.json("memory", runner, "ls") == {}
    bad = cli("memory", sid, "set", "k", '"\\udcff"', check=False)
    assert bad.returncode == 1 and "not valid Unicode" in bad.stderr and "Traceback" not in bad.stderr
