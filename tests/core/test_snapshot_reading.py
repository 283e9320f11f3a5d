"""Reading a snapshot fast changes nothing it reads: the messages parsed a batch at a time
(orjson) are the values ``json`` reads, whatever is in them, and a large file read in a
process of its own gives the same parts and the same refusals as one read in the caller's."""

from __future__ import annotations

import io
import json
from contextlib import closing
from pathlib import Path
from typing import Any

import psutil
import pytest

from procession import SnapshotError, Workspace
from procession.model import snapshot, snapshot_process

#: What a batch parser could read otherwise than json, each put among plain messages.
ODD: list[tuple[str, Any]] = [
    ("meta", {"calls": [{"author": "a", "n": 1}, {"author": "b", "n": 2}]}),  # the separator, deeper down
    ("meta", {"id": 2**64 + 1, "low": -(2**63) - 1, "fits": 2**63 - 1}),  # past 64 bits: orjson makes floats
    ("meta", {"far": 1e300, "near": 0.1, "tiny": 5e-324}),
    ("content", 'quoted },{"author": inside a text'),
    ("content", "a lone \ud800 surrogate"),  # orjson refuses it, json takes it
    ("content", "a NUL \x00 inside"),
    ("created", 2**64),  # an integer time: json keeps it an int
    ("created", 1e19),
]


def _payload(n: int, odd: list[tuple[str, Any]] = ODD) -> dict[str, Any]:
    messages = []
    for i in range(1, n + 1):
        m: dict[str, Any] = {"seq": i, "role": ("user", "assistant", "tool")[i % 3], "author": "user",
                             "content": f"message {i} " + "words and more words " * 30, "pinned": i % 7 == 0,
                             "created": 1_767_225_600.0 + i / 3, "meta": None}
        if i % 397 == 0:  # every odd case, in every position of a buffer
            field, value = odd[(i // 397) % len(odd)]
            m[field] = value
        messages.append(m)
    session = {"name": "s", "agent": "a", "goal": "", "system": "", "priority": 0, "runner": "builtin:echo", "window": 100_000,
               "timeout": None, "created": 1.0, "uuid": "u"}
    return {"session": session, "messages": messages, "folds": [], "memory": {"k": [1, 2]}, "resources": [],
            "triggers": []}


def _exactly(value: Any) -> str:
    """A value's text with its types: 1 and 1.0 differ, as a lone surrogate does from its escape."""
    return repr(value)


def _read_all(parts: Any) -> list[tuple[str, Any]]:
    return [(key, list(value) if key == "messages" else value) for key, value in parts]


def _children() -> set[psutil.Process]:
    """This process's live children (others than a test's may be there: the suite's workers
    are subreapers once an engine ran in them)."""
    return {p for p in psutil.Process().children() if p.status() != psutil.STATUS_ZOMBIE}


@pytest.fixture(scope="module")
def big() -> tuple[bytes, dict[str, Any]]:
    payload = _payload(6_000)  # ~3.8 MB: four buffers
    return snapshot.dump(payload), payload


def test_messages_read_a_batch_at_a_time_are_what_json_reads(big: tuple[bytes, dict[str, Any]]) -> None:
    data, payload = big
    assert len(data) > 3 * (1 << 20)
    rows = next(list(v) for k, v in snapshot.read(io.BytesIO(data), "f") if k == "messages")
    expected = [(m["role"], m["content"], m["author"], m["pinned"], m["meta"], m["created"])
                for m in json.loads(data)["payload"]["messages"]]
    assert len(rows) == 6_000
    assert [_exactly(r) for r in rows] == [_exactly(r) for r in expected]
    assert rows[397 - 1][4] == {"id": 2**64 + 1, "low": -(2**63) - 1, "fits": 2**63 - 1}
    assert type(rows[397 * 6 - 1][5]) is int and rows[397 * 4 - 1][1] == "a lone \ud800 surrogate"


def test_a_large_file_read_in_a_process_of_its_own_gives_the_same_parts(
        big: tuple[bytes, dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data, _ = big
    f = tmp_path / "s.json"
    f.write_bytes(data)
    with f.open("rb") as fh:
        here = _read_all(snapshot.read(fh, str(f)))
    monkeypatch.setattr(snapshot_process, "ASIDE_BYTES", 0)
    before = _children()
    with f.open("rb") as fh, closing(snapshot_process.read(fh, str(f))) as parts:
        [child] = _children() - before  # started at once: it reads while the caller begins
        aside = _read_all(parts)
        assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE  # read to the end: ended
    assert _exactly(aside) == _exactly(here)


def test_a_reader_process_closed_before_it_was_read_ends(
        big: tuple[bytes, dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A load that stops before its first part (a check failed) leaves no process behind."""
    f = tmp_path / "s.json"
    f.write_bytes(big[0])
    monkeypatch.setattr(snapshot_process, "ASIDE_BYTES", 0)
    before = _children()
    with f.open("rb") as fh:
        snapshot_process.read(fh, str(f)).close()
    assert not _children() - before


@pytest.mark.parametrize("damage", ["bad role far in", "hash", "truncated", "not as written"])
def test_a_process_of_its_own_refuses_as_the_caller_would(
        big: tuple[bytes, dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str) -> None:
    data, payload = big
    f = tmp_path / "s.json"
    match damage:
        case "bad role far in":
            payload = json.loads(data)["payload"]
            payload["messages"][5_000]["role"] = "wizard"
            f.write_bytes(snapshot.dump(payload))
        case "hash":
            f.write_bytes(data.replace(b"message 4000 ", b"message 4001 "))
        case "truncated":
            f.write_bytes(data[: len(data) * 3 // 4])
        case "not as written":
            f.write_bytes(data.replace(b'"payload":{', b'"payload": {'))

    def outcome(read: Any) -> str:
        with f.open("rb") as fh:
            parts = read(fh, str(f))
            try:
                _read_all(parts)
            except (SnapshotError, snapshot.NotAsWritten) as exc:
                return f"{type(exc).__name__}: {exc}"
            finally:
                parts.close()
        return "read"

    here = outcome(snapshot.read)
    monkeypatch.setattr(snapshot_process, "ASIDE_BYTES", 0)
    before = _children()
    assert outcome(snapshot_process.read) == here != "read"
    assert not _children() - before


def test_a_reader_process_that_dies_is_said_in_one_line(
        big: tuple[bytes, dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "s.json"
    f.write_bytes(big[0])
    monkeypatch.setattr(snapshot_process, "ASIDE_BYTES", 0)
    monkeypatch.setattr(snapshot_process.sys, "executable", "/bin/false")
    with f.open("rb") as fh, pytest.raises(SnapshotError, match=r"^cannot read .*s\.json: its reader process ended \(code 1\)$"):
        _read_all(snapshot_process.read(fh, str(f)))


@pytest.mark.parametrize("aside", [False, True])
async def test_what_a_load_stores_is_saved_again_as_it_was(
        ws: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, aside: bool) -> None:
    # the store refuses a lone surrogate and an integer past 64 bits in a column
    storable = _payload(6_000, [o for o in ODD if "surrogate" not in str(o[1]) and o[1] != 2**64])
    f, again = tmp_path / "s.json", tmp_path / "again.json"
    f.write_bytes(snapshot.dump(storable))
    if aside:
        monkeypatch.setattr(snapshot_process, "ASIDE_BYTES", 0)
    sid = (await ws.load(str(f))).sid
    await ws.save(sid, file=str(again))
    saved = json.loads(again.read_bytes())["payload"]
    assert snapshot.canonical_bytes(saved["messages"]) == snapshot.canonical_bytes(storable["messages"])
    assert saved["memory"] == storable["memory"]
