"""``SqliteStore.atomic``: a call's whole transaction as one job on SQLite's thread, still all or
nothing: a caller cancelled half-way commits nothing, a body that waits on anything but the
store is refused and commits nothing."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from procession.store import Tx
from procession.store.sqlite import SqliteStore as Store


def _keys(path: Path) -> list[str]:
    import sqlite3

    con = sqlite3.connect(path)
    try:
        return [r[0] for r in con.execute("SELECT key FROM meta WHERE key LIKE 'test%' ORDER BY key")]
    finally:
        con.close()


async def test_a_transaction_commits_whole_in_one_job(tmp_path: Path) -> None:
    store = await Store.open(tmp_path / "ws.db")
    threads: set[int] = set()

    async def body(tx: Tx) -> int:
        for i in range(3):
            await tx.execute("INSERT INTO meta (key, value) VALUES (?, ?)", (f"test{i}", "v"))
            threads.add(threading.get_ident())
        await asyncio.sleep(0)  # a bare yield is no wait
        return len(await tx.all("SELECT key FROM meta WHERE key LIKE 'test%'"))

    try:
        assert await store.atomic(body) == 3
    finally:
        await store.close()
    assert _keys(tmp_path / "ws.db") == ["test0", "test1", "test2"]
    assert len(threads) == 1 and threading.get_ident() not in threads


async def test_a_caller_cancelled_half_way_commits_nothing(tmp_path: Path) -> None:
    store = await Store.open(tmp_path / "ws.db")
    started, gate = threading.Event(), threading.Event()

    async def body(tx: Tx) -> None:
        await tx.execute("INSERT INTO meta (key, value) VALUES ('test-first', 'v')")
        started.set()
        gate.wait(10)  # SQLite's thread, held until the caller is cancelled
        await tx.execute("INSERT INTO meta (key, value) VALUES ('test-second', 'v')")

    try:
        task = asyncio.create_task(store.atomic(body))
        assert await asyncio.to_thread(started.wait, 10)
        task.cancel()
        await asyncio.sleep(0)
        gate.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        # the workspace is free again: the next call goes through
        await store.atomic(lambda tx: _insert(tx, "test-after"))
    finally:
        await store.close()
    assert _keys(tmp_path / "ws.db") == ["test-after"]


class _Elsewhere:
    """An awaitable that waits on something outside the store (as a future would)."""

    def __await__(self) -> Generator[Any, None, None]:
        yield self


async def test_a_body_that_waits_on_anything_else_is_refused_and_commits_nothing(tmp_path: Path) -> None:
    store = await Store.open(tmp_path / "ws.db")

    async def body(tx: Tx) -> None:
        await _insert(tx, "test-waited")
        await _Elsewhere()

    try:
        with pytest.raises(RuntimeError, match="outside the store"):
            await store.atomic(body)
        await store.atomic(lambda tx: _insert(tx, "test-after"))
    finally:
        await store.close()
    assert _keys(tmp_path / "ws.db") == ["test-after"]


async def _insert(tx: Tx, key: str) -> None:
    await tx.execute("INSERT INTO meta (key, value) VALUES (?, 'v')", (key,))
