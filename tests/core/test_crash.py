"""A process killed with SIGKILL in the middle of a stream of system calls loses nothing it
reported as done and leaves nothing half-done.

A child process performs calls on a workspace (sends, transcripts, memory sets, forks,
merges, compresses) and prints one line after each call returns, that is after its
transaction committed. The parent kills it at a different point each time, then opens the
workspace: the file is intact, every reported call is there, and what is in the tables is
exactly what the journal says was done — whole calls, never part of one.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from procession import Workspace

CHILD = r'''
import asyncio, sys
from procession import ProcessionError, Workspace

FILLER = "The ledger needs checking against the audited figures. " * 3

async def main(path):
    ws = await Workspace.open(path)
    root = (await ws.spawn("root", "crash", system="You keep the books.")).sid
    print("spawn", root, flush=True)
    forks = []
    i = 0
    while True:
        i += 1
        step = i % 9
        if step in (0, 1, 2):
            sid = forks[-1] if forks and i % 2 else root
            seq = (await ws.send(sid, f"message {i}. {FILLER}")).seq
            print("send", sid, seq, i, flush=True)
        elif step == 3:
            await ws.memory_set(root, f"k{i % 3}", i)
            print("memory", root, f"k{i % 3}", i, flush=True)
        elif step == 4:
            child = (await ws.fork(root, at=None if i % 2 else max(0, (await ws.info(root)).length - 3))).sid
            forks.append(child)
            print("fork", root, child, flush=True)
        elif step == 5:
            n = (await ws.send_many(root, [{"role": "assistant" if j % 2 else "user",
                                           "content": f"bulk {i}.{j}. {FILLER}"} for j in range(300)])).count
            print("many", root, n, i, flush=True)
        elif step == 6 and forks:
            source = forks.pop(0)
            result = await ws.merge(source, root)
            print("merge", source, root, result.messages, flush=True)
        elif step == 7:
            try:
                await ws.compress(root, 5)
                print("compress", root, flush=True)
            except ProcessionError:
                pass
        elif step == 8 and forks:
            await ws.memory_set(forks[-1], "note", i)
            print("memory", forks[-1], "note", i, flush=True)

asyncio.run(main(sys.argv[1]))
'''

#: (lines to wait for before the kill, extra milliseconds): a different point of the stream each time
KILL_POINTS = [(4, 0), (19, 3), (43, 1), (71, 8), (97, 15)]


def read_lines(proc: subprocess.Popen[bytes], n: int, timeout: float = 20.0) -> list[str]:
    """Wait until the child has reported ``n`` calls (or fail if it stalls or dies)."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    lines: list[str] = []
    buf = b""
    deadline = time.monotonic() + timeout
    while len(lines) < n:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            raise AssertionError(f"the child reported only {len(lines)} calls in {timeout} s")
        chunk = os.read(fd, 65536)
        if not chunk:
            err = proc.stderr.read().decode() if proc.stderr else ""
            raise AssertionError(f"the child ended after {len(lines)} calls: {err}")
        buf += chunk
        *done, buf = buf.split(b"\n")
        lines += [d.decode() for d in done]
    proc._leftover = buf  # type: ignore[attr-defined]
    return lines


def rows(con: sqlite3.Connection, sql: str, params: tuple = ()) -> list[tuple]:
    return con.execute(sql, params).fetchall()


@pytest.mark.parametrize(("wait_for", "extra_ms"), KILL_POINTS)
async def test_sigkill_mid_stream_loses_nothing_reported_and_half_applies_nothing(
    tmp_path: Path, wait_for: int, extra_ms: int
) -> None:
    db = tmp_path / "ws.db"
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    proc = subprocess.Popen([sys.executable, str(script), str(db)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        reported = read_lines(proc, wait_for)
        if extra_ms:
            time.sleep(extra_ms / 1000)  # move the kill a little further into the next call
        proc.send_signal(signal.SIGKILL)
        rest = proc._leftover + proc.stdout.read()  # type: ignore[attr-defined, union-attr]
    finally:
        proc.kill()
        proc.wait(timeout=10)
        proc.stdout.close()  # type: ignore[union-attr]
        proc.stderr.close()  # type: ignore[union-attr]
    assert proc.returncode == -signal.SIGKILL
    # lines printed before the kill were printed after their commit: they count too (a cut
    # last line does not)
    reported += [line.decode() for line in rest.split(b"\n")[:-1]]
    calls = [line.split() for line in reported]
    assert calls[0][0] == "spawn"

    con = sqlite3.connect(db)
    try:
        assert rows(con, "PRAGMA integrity_check") == [("ok",)]
        assert rows(con, "PRAGMA foreign_key_check") == []
        journal = rows(con, "SELECT call, session_id, other_id, args, outcome FROM journal ORDER BY id")
        # every reported call is in the journal, in order; at most one more committed unreported
        assert len(reported) <= len(journal) <= len(reported) + 1
        assert [j[0] for j in journal[: len(calls)]] == [c[0] if c[0] != "many" else "send" for c in calls]

        # the data is exactly what the journal says was done
        done = Counter(j[0] for j in journal)
        sessions = rows(con, "SELECT id, parent_id, fork_seq, length, state, reason FROM sessions ORDER BY id")
        assert len(sessions) == done["spawn"] + done["fork"]
        assert sum(1 for s in sessions if s[1] is not None) == done["fork"]
        assert sum(1 for s in sessions if s[5] == "merged") == done["merge"]
        appended = 0
        for call, _sid, _other, args, outcome in journal:
            a, o = json.loads(args), json.loads(outcome)
            if call == "send":  # one message, or a transcript whose outcome says how many
                appended += o["count"]
            elif call == "merge":
                appended += o["messages"]
        own = dict(rows(con, "SELECT session_id, count(*) FROM messages GROUP BY session_id"))
        assert sum(own.values()) == appended
        for sid, _parent, fork_seq, length, _state, _reason in sessions:
            seqs = [r[0] for r in rows(con, "SELECT seq FROM messages WHERE session_id = ? ORDER BY seq", (sid,))]
            assert seqs == list(range(fork_seq + 1, length + 1)), f"session {sid} has a gap or a half write"
        root = sessions[0][0]  # compress only acts on the root (forks inherit copies of its folds)
        assert rows(con, "SELECT count(*) FROM folds WHERE session_id = ?", (root,))[0][0] == done["compress"]
        # memory: each key holds the value of the last memory call the journal has for it
        last: dict[tuple[int, str], int] = {}
        for call, sid, _other, args, _outcome in journal:
            if call == "memory":
                a = json.loads(args)
                last[(sid, a["key"])] = a["value"]
        stored = {(sid, key): json.loads(value) for sid, key, value in rows(con, "SELECT session_id, key, value FROM memory"
                                                                          " ORDER BY session_id, key, rev")}  # newest last
        for key, value in last.items():
            assert stored[key] == value
    finally:
        con.close()

    # every reported call, checked through the engine; and the workspace works on
    ws = await Workspace.open(db)
    try:
        for call in calls:
            match call:
                case ["send", sid, seq, i]:
                    msg = (await ws.history(int(sid), int(seq) - 1, int(seq)))[0]
                    assert msg.content.startswith(f"message {i}. ")
                case ["many", sid, n, i]:
                    contents = [m.content for m in await ws.history(int(sid))]
                    assert sum(1 for c in contents if c.startswith(f"bulk {i}.")) == int(n) == 300
                case ["memory", sid, key, value]:
                    pass  # checked against the journal above (a later call may have changed it)
                case ["fork", parent, child]:
                    assert (await ws.info(int(child))).parent == int(parent)
                case ["merge", source, target, n]:
                    info = await ws.info(int(source))
                    assert info.reason == "merged" and info.merged_into == int(target)
                    merged = [m for m in await ws.history(int(target)) if (m.meta or {}).get("merged_from") == int(source)]
                    assert len(merged) == int(n)
        for s in await ws.ps(all=True):
            ctx = await ws.context(s.id)
            detail = await ws.show(s.id)
            system = ws.store.count_tokens(detail.system) if detail.system else 0
            assert s.context_tokens == system + sum(i.tokens for i in ctx)
            assert s.messages == len(ctx) and s.length == len(await ws.history(s.id))
        root = (await ws.ps(all=True))[0].id
        before = (await ws.info(root)).length
        await ws.send(root, "after the crash")
        assert (await ws.info(root)).length == before + 1
    finally:
        await ws.close()
