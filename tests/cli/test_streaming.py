"""Whole reads stream: memory of ``history --json``, ``show --json``, ``save -o``, ``load`` and
``send --jsonl`` stays flat in the history length (a whole process's peak RSS, at 12,000 and
40,000 messages), and the streamed snapshot is byte for byte the one ``dump`` writes of the whole payload."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from conftest import Clock
from procession import Workspace
from procession.model import snapshot
from procession.store import rows

BENCH = Path(__file__).resolve().parents[2] / "bench"


async def _batches(items: list[dict[str, Any]], size: int) -> AsyncIterator[list[dict[str, Any]]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]
    yield []


async def test_a_streamed_snapshot_is_the_whole_dump() -> None:
    messages = [{"seq": i, "role": "user", "content": f"é\u0085 {i}", "author": "user", "pinned": i % 3 == 0,
                 "created": 1.5 + i, "meta": {"k": [i]} if i % 4 == 0 else None} for i in range(1, 12)]
    rest = {"session": {"name": "s", "b": None}, "folds": [{"lo": 1, "hi": 2, "summary": "x"}], "memory": {"a": 1},
            "resources": [], "triggers": [{"kind": "every", "spec": {"s": 300}}]}
    for payload in (rest, {}, {"session": {"name": "only after"}}, {"folds": []}):
        for size in (1, 5, 100):
            fh = io.BytesIO()
            written, digest = await snapshot.write(fh, payload, _batches(messages, size))
            whole = snapshot.dump({**payload, "messages": messages})
            assert fh.getvalue() == whole and written == len(whole)
            assert digest in whole.decode()


def _peak_mb(db: Path, cwd: Path, *args: str) -> int:
    sys.path.insert(0, str(BENCH))
    try:
        from scale import cli  # a launcher of its own: a child of pytest would count pytest's pages
    finally:
        sys.path.remove(str(BENCH))
    return cli(db, list(args), cwd)[1]


async def test_memory_of_whole_reads_is_flat_in_the_history_length(tmp_path: Path) -> None:
    db = tmp_path / "ws.db"
    ws = await Workspace.open(db, clock=Clock())
    sids = {}
    text = "the regional figures checked against the audited ledger, one line of many " * 3
    for n in (12_000, 40_000):  # both past a chunk: a long append works in a larger page cache, of a fixed size
        sids[n] = (await ws.spawn(f"s{n}", "a")).sid
        await ws.send_many(sids[n], [{"role": "user", "content": f"{i} {text}"} for i in range(n)])
    await ws.close()
    peaks: dict[tuple[str, int], int] = {}
    for n, sid in sids.items():
        transcript = tmp_path / f"{n}.jsonl"
        transcript.write_text("".join(json.dumps({"role": "user", "content": f"{i} {text}"}) + "\n" for i in range(n)))
        for what, args in (("json", ["history", str(sid), "--json"]), ("show", ["show", str(sid), "--json"]),
                           ("save", ["save", str(sid), "-o", str(tmp_path / f"{n}.json")]),
                           ("load", ["load", str(tmp_path / f"{n}.json")]),
                           ("jsonl", ["send", str(sid), "--jsonl", str(transcript)])):
            peaks[what, n] = _peak_mb(db, tmp_path, *args)
    # 28,000 more messages of ~230 bytes are ~6 MB of text; a whole list of them in memory
    # (what the reads held before: +85 MB for 54,000 more) costs far more than that bound. A
    # long append's page cache has a fixed size, which the longer one fills (with the search
    # index's pages too: it stays there at 80,000 messages, 1-2 MB more than at 40,000)
    cache = rows.BULK_CACHE_KIB // 1024
    for what in ("json", "show", "save", "load", "jsonl"):
        bound = 10 + (cache if what in ("load", "jsonl") else 0)
        assert peaks[what, 40_000] <= peaks[what, 12_000] + bound, peaks
