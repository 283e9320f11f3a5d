"""migrate between models: the context counted as the new model counts it (a real tokenizer
file, else the workspace's counter, calibration anew), and a context that does not fit the
new window refused or compressed by the method chosen (extractive, mask-tools, model), all
reversible; through the calls and the CLI."""

from __future__ import annotations

import json

import pytest

from procession.engine.summaries import migrate_by_model
from procession.model.errors import ContextTooLarge, InvalidArgument
from procession.store import tokens
from support.models import ModelServer, Script, say

from test_compress_methods import shape, tool_heavy


def tokenizer_json(path, text):
    """A real tokenizer.json (byte-level BPE, trained here) that counts ``text`` in more
    tokens than the estimator does: few merges."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator([text], trainers.BpeTrainer(vocab_size=280, show_progress=False,
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.save(str(path))
    return str(path)


async def test_the_new_models_tokenizer_recounts_and_a_context_it_makes_too_large_is_refused(ws, tmp_path):
    sid = await tool_heavy(ws, 10, runner="openai:old")
    context = await ws.context(sid)
    path = tokenizer_json(tmp_path / "tokenizer.json", "\n".join(i.content for i in context))
    stored = (await ws.info(sid)).context_tokens
    real = tokens.load(path)
    recounted = sum(real.count(i.content) for i in context)
    assert recounted > stored * 1.2
    window = (stored + recounted) // 2  # the estimator's count fits it, the model's does not
    with pytest.raises(ContextTooLarge, match=f"context is {recounted} tokens \\({path} \\(x"):
        await ws.migrate(sid, "openai:new", window=window, tokenizer=path)
    info = await ws.info(sid)
    assert (info.runner, info.context_tokens) == ("openai:old", stored)  # nothing changed
    done = await ws.migrate(sid, "openai:new", window=window, tokenizer=path, compress=True)
    assert done.fold is not None and done.context_tokens <= window
    assert done.tokenizer.startswith(path) and done.context_tokens == (await ws.info(sid)).context_tokens
    await ws.expand(sid)
    assert shape(await ws.context(sid)) == shape(context)

    # the same model on a larger window keeps its counting; another model without a tokenizer
    # here is counted by the workspace's counter, its calibration anew
    kept = await ws.migrate(sid, "openai:new", window=10 * window)
    assert kept.tokenizer == done.tokenizer and kept.context_tokens == recounted
    moved = await ws.migrate(sid, "openai:other", window=10 * window)
    assert (moved.tokenizer, moved.context_tokens) == ("bytes/4", stored)


async def test_migrate_compresses_by_masking_tool_outputs(ws):
    sid = await tool_heavy(ws, 20, runner="openai:old")
    before, stored = shape(await ws.context(sid)), (await ws.info(sid)).context_tokens
    done = await ws.migrate(sid, "openai:small", window=stored // 2, compress=True, method="mask-tools")
    after = await ws.context(sid)
    assert done.context_tokens <= stored // 2 and len(after) == len(before)
    assert all(i.content.startswith("[tool call data_read") for i in after if i.fold is not None)
    await ws.expand(sid)
    assert shape(await ws.context(sid)) == before
    # what masking cannot free is refused, nothing changed
    with pytest.raises(ContextTooLarge, match="by mask-tools: its older tool outputs are not enough"):
        await ws.migrate(sid, "openai:tiny", window=stored // 10, compress=True, method="mask-tools")
    assert shape(await ws.context(sid)) == before and (await ws.info(sid)).runner == "openai:small"


async def test_migrate_compresses_by_a_model_summary(ws):
    with ModelServer(Script(say("- 20 tables of 40 employees read\n- top pay 1273"))) as server:
        sid = await tool_heavy(ws, 20, runner=f"openai:old@{server.url_v1}")
        before, stored = shape(await ws.context(sid)), (await ws.info(sid)).context_tokens
        done = await migrate_by_model(ws, sid, "openai:small", window=stored // 4)
        assert len(server.turn_requests()) == 1  # the session's own model was asked, once
        assert done.fold is not None and done.context_tokens <= stored // 4
        context = await ws.context(sid)
        assert context[0].content.startswith("[summary of") and "top pay 1273" in context[0].content
        await ws.expand(sid)
        assert shape(await ws.context(sid)) == before
        # a context that fits asks no model
        await migrate_by_model(ws, sid, "openai:large", window=stored * 2)
        assert len(server.turn_requests()) == 1


async def test_migrate_refuses_an_unknown_method_and_a_summary_it_was_not_given(ws):
    sid = await tool_heavy(ws, 4, runner="openai:old")
    with pytest.raises(InvalidArgument, match="no compress method 'gzip'"):
        await ws.migrate(sid, "openai:new", window=50, compress=True, method="gzip")
    with pytest.raises(InvalidArgument, match="compress by model needs the model's summary"):
        await ws.migrate(sid, "openai:new", window=50, compress=True, method="model")


def test_migrate_compress_methods_through_the_cli(cli, tmp_path):
    sid = json.loads(cli("--json", "spawn", "s", "--agent", "a", "--runner", "openai:old").stdout)["sid"]
    (tmp_path / "t.jsonl").write_text("".join(
        json.dumps({"role": "user", "content": f"message {i}: " + "the payroll closes on the 28th. " * 8}) + "\n"
        for i in range(30)))
    cli("send", str(sid), "--jsonl", str(tmp_path / "t.jsonl"))
    err = cli("migrate", str(sid), "--runner", "openai:new", "--window", "400", check=False)
    assert err.returncode != 0 and "pass --compress" in err.stderr
    bad = cli("migrate", str(sid), "--runner", "openai:new", "--compress", "gzip", check=False)
    assert bad.returncode == 2 and "invalid choice: 'gzip'" in bad.stderr
    out = cli("migrate", str(sid), "--runner", "openai:new", "--window", "400", "--compress")
    assert "compressed to fit" in out.stdout and "(extractive)" in out.stderr + out.stdout
