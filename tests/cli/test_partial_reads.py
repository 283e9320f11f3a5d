"""Reads that print a part cost a part: history --tail/--range, show --tail, ps --limit/--sort,
the streamed JSON (the same text as a whole dump), and the active context read without the
history it hides."""

from __future__ import annotations

import json

from conftest import Cli
from procession import Workspace
from procession.calls import history
from procession.cli.terminal import json_text
from procession.present import lines


def _messages(n: int) -> list[dict[str, object]]:
    return [{"role": "system" if i == 0 else ("user", "assistant")[i % 2],
             "content": f"message {i} " + "about the quarterly ledger and its regional figures " * 3,
             **({"pinned": True} if i % 37 == 5 else {})}
            for i in range(n)]


async def test_history_tail_range_and_streamed_json(ws: Workspace, cli: Cli) -> None:
    sid = (await ws.spawn("long", "a")).sid
    await ws.send_many(sid, _messages(2_500))  # above one streamed batch
    whole = await ws.history(sid)
    assert cli("history", str(sid), "--json").stdout == \
        json_text([{"seq": m.seq, "role": m.role, "content": m.content, "tokens": m.tokens, "author": m.author,
                    "pinned": m.pinned, "created": m.created, "meta": m.meta} for m in whole]) + "\n"  # as emit prints it
    tail = cli.json("history", str(sid), "--tail", "3")
    assert [m["seq"] for m in tail] == [2_498, 2_499, 2_500]  # type: ignore[index,union-attr]
    ranged = cli.json("history", str(sid), "--range", "10:12")
    assert [m["seq"] for m in ranged] == [10, 11, 12]  # type: ignore[index,union-attr]
    assert [m["seq"] for m in cli.json("history", str(sid), "--range", "10:", "--tail", "2")] == [2_499, 2_500]  # type: ignore[index,union-attr]
    assert [m["seq"] for m in cli.json("history", str(sid), "--range", ":3")] == [1, 2, 3]  # type: ignore[index,union-attr]
    lines = cli("history", str(sid), "--tail", "2", "--short").stdout.splitlines()
    assert len(lines) == 2 and "message 2499" in lines[-1]
    assert cli("history", str(sid), "--range", "5:3", check=False).returncode == 2
    refused = cli("history", "999", "--json", check=False)
    assert refused.returncode != 0 and refused.stdout == ""
    empty = (await ws.spawn("empty", "a")).sid
    assert cli("history", str(empty), "--json").stdout == "[]\n"


async def test_show_tail_and_the_active_context_read_sparsely(ws: Workspace, cli: Cli) -> None:
    sid = (await ws.spawn("long", "a")).sid
    await ws.send_many(sid, _messages(3_000))
    await ws.compress(sid, keep_last=50)
    await ws.send_many(sid, _messages(200)[1:])
    await ws.compress(sid, keep_last=20)
    await ws.send_many(sid, _messages(30)[1:])
    async with ws.store.snapshot() as tx:
        in_force = await history.folds(tx, sid)
        full = history.active(await history.read(tx, sid), in_force)
        assert await history.context(tx, sid, in_force) == full
        for last in (1, 29, 30, 40, len(full), len(full) + 5):
            assert await history.context(tx, sid, in_force, last=last) == full[-last:]
    shown = cli.json("show", str(sid), "--tail", "5")
    assert [c["seq"] for c in shown["context"]] == [i.seq for i in full[-5:]]  # type: ignore[index]
    assert len(cli.json("show", str(sid))["context"]) == len(full)  # type: ignore[index,arg-type]


async def test_ps_limit_sort_and_streamed_json(ws: Workspace, cli: Cli) -> None:
    for i in range(30):
        sid = (await ws.spawn(f"s{i}", f"agent{i % 3}", priority=(i * 7) % 10 - 5)).sid
        if i % 4 == 0:
            await ws.trigger_add(sid, "every", ["5m"])
    listed = cli.json("ps")
    assert listed == [s.to_json() for s in await ws.ps()]
    top = cli.json("ps", "--sort", "priority", "-r", "--limit", "4")
    expected = sorted(await ws.ps(), key=lambda s: (-s.priority, -s.id))[:4]
    assert [s["sid"] for s in top] == [s.id for s in expected]  # type: ignore[index,union-attr]
    assert [s.id for s in await ws.ps(sort="name", limit=3)] == \
        [s.id for s in sorted(await ws.ps(), key=lambda s: (s.name, s.id))[:3]]
    assert "3 sessions" in cli("ps", "-n", "3").stdout
    assert cli("ps", "--sort", "nope", check=False).returncode == 2


async def test_show_streams_a_long_context_as_the_whole_text(ws: Workspace, cli: Cli) -> None:
    sid = (await ws.spawn("long", "a", system="be brief")).sid
    await ws.send_many(sid, _messages(4_500))  # three streamed batches
    await ws.memory_set(sid, "context", [])  # a user's key cannot be taken for the streamed one
    detail = await ws.show(sid)
    assert json.loads(cli("show", str(sid), "--json").stdout) == json.loads(json.dumps(detail.to_json()))
    text = cli("show", str(sid)).stdout.splitlines()
    assert text[text.index("context:") + 1:] == ["  " + lines.context_line(i) for i in detail.context]
    empty = (await ws.spawn("empty", "a")).sid
    assert cli.json("show", str(empty))["context"] == []  # type: ignore[index]


def _on_a_terminal(cli: Cli, rows: int, columns: int, *args: str) -> str:
    """What ``procession ARGS`` prints to a pseudo-terminal of that size."""
    import fcntl
    import os
    import pty
    import struct
    import subprocess
    import sys
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    env = {k: v for k, v in cli.env().items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen([sys.executable, "-m", "procession", *args], stdin=subprocess.DEVNULL, stdout=slave,
                            stderr=subprocess.PIPE, env=env, cwd=cli.cwd)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the other end closed: the process is done
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert proc.wait(timeout=60) == 0, proc.stderr.read() if proc.stderr else ""
    return out.decode().replace("\r\n", "\n")


async def test_show_on_a_terminal_prints_a_screenful_and_says_how_to_see_more(ws: Workspace, cli: Cli) -> None:
    sid = (await ws.spawn("long", "a")).sid
    await ws.send_many(sid, _messages(300))
    await ws.memory_set(sid, "plan", {"steps": [1, 2]})
    screen = _on_a_terminal(cli, 30, 200, "show", str(sid))
    printed = screen.rstrip("\n").split("\n")
    assert len(printed) <= 30 - 1  # and the prompt's line after it
    assert "plan" in screen and "context:" in screen
    assert "message 299 " in printed[-2] and "message 1 " not in screen
    shown = sum(1 for line in printed if line.startswith("  ["))
    assert printed[-1] == (f"(the last {shown} of 300 context items: `procession show {sid} --tail N` shows the"
                           f" last N, `procession history {sid}` every message whole)")
    narrow = _on_a_terminal(cli, 30, 60, "show", str(sid)).rstrip("\n").split("\n")  # each line wraps once
    assert sum(-(-len(line) // 60) or 1 for line in narrow) <= 30 - 1
    piped = cli("show", str(sid)).stdout  # not a terminal: the whole context, no note
    assert "message 1 " in piped and "message 299 " in piped and "shows the last N" not in piped
    assert len(piped.splitlines()) > 300
    short = (await ws.spawn("short", "a")).sid
    await ws.send(short, "hello")
    assert "shows the last N" not in _on_a_terminal(cli, 30, 200, "show", str(short))


def test_a_tool_call_on_one_line_says_what_ran_and_what_came_of_it() -> None:
    from procession.model.records import ContextItem, Message
    from procession.model.toolcalls import tool_message

    def line(*call: object) -> str:
        role, content, meta = tool_message(*call)  # type: ignore[arg-type]
        item = ContextItem(seq=7, role=role, content=content, tokens=9, meta=meta)
        message = Message(seq=7, role=role, content=content, tokens=9, author="claude", pinned=False,
                          created=0.0, meta=meta)
        assert lines.history_line(message, short=True).endswith(lines.context_line(item).split("tool      ")[1])
        return lines.context_line(item)

    assert line("c1", "Bash", {"command": "ls -la"}, "total 8\ndrwx a\n-rw- b\n", False) == (
        "[    7] tool      Bash: ls -la -> 3 lines of output")
    assert line("c2", "Read", {"file_path": "/x"}, "one line", False).endswith("Read: /x -> 1 line of output")
    assert line("c3", "Bash", {"command": "false"}, "\nexit 1: no such file\nmore", True).endswith(
        "Bash: false -> error: exit 1: no such file")
    assert line("c4", "Bash", {"command": "sleep 9"}, None, False).endswith("Bash: sleep 9 -> no result")
    assert line("c5", "Write", {"path": "/y"}, "", False).endswith("Write: /y -> no output")
    plain = ContextItem(seq=1, role="user", content="a\nb", tokens=1)
    assert lines.context_line(plain) == "[    1] user      a b"
