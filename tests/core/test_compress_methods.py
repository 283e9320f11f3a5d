"""compress --mask-tools, --summary and --model: each folds reversibly (expand gives back the
exact context), on a tool-heavy session stored as the runners store theirs."""

from __future__ import annotations

import pytest

from procession.calls.context import DEFAULT_KEEP_LAST
from procession.model.toolcalls import tool_message
from procession.engine.summaries import compress_by_model
from procession.model.errors import InvalidArgument, ProcessionError
from procession.store import rows
from support.models import ModelServer, Script, say


async def tool_heavy(ws, n: int = 20, runner: str = "builtin:echo") -> int:
    """A session of ``n`` exchanges: a question, a tool call with a long output, an answer."""
    sid = (await ws.spawn("tools", "a", runner=runner)).sid
    messages = []
    for i in range(n):
        output = "\n".join(f"row {i}.{j}: employee E{j:03d} grade {'ABC'[j % 3]} paid {1000 + j * 7}"
                           for j in range(40))
        role, content, meta = tool_message(f"c{i}", "data_read", {"path": f"t{i}.csv"}, output, False)
        messages += [("user", f"What does table {i} hold?", "user", False, None),
                     (role, content, "runner", False, meta),
                     ("assistant", f"Table {i} holds 40 employees; the top pay is {1000 + 39 * 7}.", "runner", False,
                      None)]
    async with ws.store.tx() as tx:
        await rows.append(tx, await rows.session(tx, sid), messages, ws.store.count_tokens)
    return sid


def shape(items):
    return [(i.seq, i.role, i.content, i.meta, i.fold) for i in items]


async def test_mask_tools_stubs_older_outputs_and_expand_restores_them(ws):
    sid = await tool_heavy(ws)
    before, tokens = await ws.context(sid), (await ws.info(sid)).context_tokens
    done = await ws.compress(sid, 6, mask_tools=True)
    after = await ws.context(sid)
    assert done.masked == 18 and len(after) == len(before)
    stubs = [i for i in after if i.fold is not None]
    assert len(stubs) == 18 and stubs[0].content.startswith("[tool call data_read: t0.csv — its output of")
    assert [i.role for i in after if i.fold is None][:2] == ["user", "assistant"]
    assert done.context_tokens < tokens // 3 and done.context_tokens == (await ws.info(sid)).context_tokens
    assert [i.role for i in after[-6:]] == ["user", "tool", "assistant"] * 2  # the last ones untouched
    undone = await ws.expand(sid)
    assert undone.undone == 18 and undone.in_force == 0 and undone.context_tokens == tokens
    assert shape(await ws.context(sid)) == shape(before)


async def test_mask_then_compress_then_expand_twice_is_the_original(ws):
    sid = await tool_heavy(ws)
    before = shape(await ws.context(sid))
    await ws.compress(sid, 30, mask_tools=True)
    await ws.compress(sid, 4)
    await ws.expand(sid)
    await ws.expand(sid)
    assert shape(await ws.context(sid)) == before


async def test_a_summary_of_ones_own(ws):
    sid = await tool_heavy(ws, 4)
    before = shape(await ws.context(sid))
    done = await ws.compress(sid, 3, summary="Tables 0-2 read; top pay 1273 each.")
    context = await ws.context(sid)
    assert context[0].content == "Tables 0-2 read; top pay 1273 each." and done.fold.archived_count == 9
    with pytest.raises(InvalidArgument):
        await ws.compress(sid, 0, summary="  ")
    await ws.expand(sid)
    assert shape(await ws.context(sid)) == before


async def test_compress_by_the_sessions_model(ws):
    with ModelServer(Script(say("- 20 tables of 40 employees read\n- top pay 1273"))) as server:
        sid = await tool_heavy(ws, runner=f"openai:small@{server.url_v1}")
        before = shape(await ws.context(sid))
        done = await compress_by_model(ws, sid)
        request = server.turn_requests()[0]
    assert "every file path" in request.body["messages"][0]["content"]
    assert "t0.csv" in request.body["messages"][1]["content"] and "tools" not in request.body
    summary = (await ws.context(sid))[0]
    assert summary.content.startswith("[summary of 52 earlier messages, by small]\n- 20 tables")
    assert done.fold.archived_count == 52 and done.context_tokens < done.fold.archived_tokens
    await ws.expand(sid)
    assert shape(await ws.context(sid)) == before


async def test_a_model_is_needed_and_a_moved_context_refused(ws):
    sid = await tool_heavy(ws, 3)
    with pytest.raises(InvalidArgument, match="not a model"):
        await compress_by_model(ws, sid)
    plan = await ws.fold_plan(sid, DEFAULT_KEEP_LAST)
    await ws.send(sid, "one more")
    with pytest.raises(ProcessionError, match="changed while its summary was made"):
        await ws.compress(sid, DEFAULT_KEEP_LAST, summary="s", expect=(plan.lo, plan.hi))
    with pytest.raises(ProcessionError, match="nothing to mask"):
        await ws.compress(sid, 100, mask_tools=True)


async def test_the_cli_ways_to_compress(ws, cli):
    sid = str(await tool_heavy(ws, 4))
    assert "masked 3 tool outputs" in cli("compress", sid, "--mask-tools", "--keep-last", "3").stdout
    cli("expand", sid)
    cli("compress", sid, "--summary", "-", input="my own words")
    assert (await ws.context(int(sid)))[0].content == "my own words"
    both = cli("compress", sid, "--model", "--mask-tools", check=False)
    assert both.returncode != 0 and "choose one way to compress" in both.stderr
    no_model = cli("compress", sid, "--model", check=False)
    assert no_model.returncode != 0 and "not a model Procession can ask" in no_model.stderr


async def test_the_extractive_summary_keeps_both_sides(ws):
    sid = (await ws.spawn("cvs", "hr")).sid
    transcript = []
    for n in range(28):  # each CV in words of its own; the replies repeat theirs
        words = " ".join(f"{w}{n}" for w in ("skill", "employer", "degree", "town", "project", "award"))
        transcript += [{"role": "user", "content": f"Applicant {words}."},
                       {"role": "assistant", "content": "Strong match for the backend role; shortlist the candidate.",
                        "author": "runner"}]
    await ws.send_many(sid, transcript[:55])
    summary = (await ws.compress(sid, 0)).fold.summary
    lines = summary.splitlines()[1:]
    assert any(line.startswith("user: Applicant") for line in lines) and any(line.startswith("assistant:") for line in lines)



async def test_mask_tools_of_a_loaded_snapshot_whose_tool_meta_is_not_a_call(ws, tmp_path):
    """A snapshot's meta may say anything: a ``tool`` that is not an object is masked as text."""
    import json

    from procession.model import snapshot

    sid = await tool_heavy(ws, 10)
    f = tmp_path / "s.json"
    await ws.save(sid, file=str(f))
    payload = json.loads(f.read_bytes())["payload"]
    payload["messages"][1]["meta"]["tool"] = "not a call"
    f.write_bytes(snapshot.dump(payload))
    loaded = (await ws.load(str(f))).sid
    expected = (await ws.compress(await tool_heavy(ws, 10), 4, mask_tools=True)).masked
    assert (await ws.compress(loaded, 4, mask_tools=True)).masked == expected
