"""A session's context as its model counts it: a real tokenizer's count (a tokenizer.json
made here with the ``tokenizers`` package), and the calibration by the usage the scripted
model server reports, with a real engine."""

from __future__ import annotations

import pytest

from conftest import until
from procession.model.errors import ContextTooLarge, InvalidArgument
from procession.store import tokens
from support.models import ModelServer, Script, Usage, say, tool_call

PROSE = "The payroll for March closes on the 28th; grade B rates rise by 0.25 points. " * 40


@pytest.fixture
def model():
    with ModelServer(Script()) as server:
        yield server


async def ended(ws, sid, n):
    runs = [r for r in await ws.runs(sid) if r.ended]
    return runs if len(runs) >= n else None


async def shown(ws, sid):
    """The context figure every listing shows (ps, the monitor's table)."""
    return next(s for s in await ws.ps() if s.id == sid).context_tokens


async def test_server_usage_calibrates_the_context_figure(live, engine, model, tmp_path):
    sid = (await live.spawn("loop", "a", runner=f"openai:m@{model.url_v1}", cwd=str(tmp_path))).sid
    await live.send(sid, PROSE)
    reported = 1500
    model.script.add(say("ok", usage=Usage(input=reported)))
    await live.send(sid, "go")
    before = await shown(live, sid)
    await live.activate(sid)
    await until(lambda: ended(live, sid, 1))
    sent = model.turn_requests()[0].body["messages"]
    counted = sum(tokens.estimate(m["content"]) for m in sent)
    detail = await live.show(sid)
    assert detail.token_scale == pytest.approx(reported / counted)
    assert detail.tokenizer == f"bytes/4 x{reported / counted:.2f}, calibrated over 1 model request"
    after = await shown(live, sid)
    # what was sent, as the model counts it, is now the figure (the reply "ok" added since)
    assert abs(before - reported) / reported > 0.25
    assert after == tokens.scaled(counted + tokens.estimate("ok"), reported / counted)
    assert abs(after - reported) / reported < 0.01

    # a run of two requests (a tool call, then the answer): two more reports, a running mean
    (tmp_path / "rates.csv").write_text("A,0.2\n")
    await live.bind(sid, "file", str(tmp_path / "rates.csv"), mode="ro")
    model.script.add(tool_call("rates_csv_read", {}, usage=Usage(input=2000)), say("done", usage=Usage(input=2100)))
    await live.send(sid, "again")
    await live.activate(sid)
    await until(lambda: ended(live, sid, 2))
    detail = await live.show(sid)
    assert detail.tokenizer.endswith("calibrated over 3 model requests")
    second = [counted_request(r.body) for r in model.turn_requests()[1:]]
    # a running mean over the requests; two reports the engine took in one flush count as their sums
    first = reported / counted
    apart, together = (2000 / second[0], 2100 / second[1]), (4100 / sum(second),) * 2
    assert any(detail.token_scale == pytest.approx((first + sum(r)) / 3) for r in (apart, together))


def counted_request(body):
    from procession.engine.runners.http import counted
    return counted(body, tokens.estimate)


def tokenizer_json(path):
    """A real tokenizer.json: a byte-level BPE trained here on the test's text (a model's
    repository ships one of these beside its weights)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator([PROSE], trainers.BpeTrainer(vocab_size=300, show_progress=False,
                                                         initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.save(str(path))
    return tok


async def test_a_tokenizer_file_counts_the_context_once_and_every_listing_shows_it(ws, tmp_path):
    sid = (await ws.spawn("loop", "a", runner="openai:m@http://127.0.0.1:9/v1", system="You do payroll.",
                          cwd=str(tmp_path))).sid
    await ws.send(sid, PROSE)
    await ws.send(sid, "what closes on the 28th?")
    tok = tokenizer_json(tmp_path / "tokenizer.json")
    real = sum(tokens.MESSAGE_OVERHEAD + len(tok.encode(t, add_special_tokens=False).ids)
               for t in ("You do payroll.", PROSE, "what closes on the 28th?"))
    stored = (await ws.info(sid)).context_tokens
    assert stored != real
    done = await ws.set_tokenizer(sid, str(tmp_path / "tokenizer.json"))
    assert done.context_tokens == real == (await ws.info(sid)).context_tokens
    detail = await ws.show(sid)
    assert detail.tokenizer == f"{tmp_path / 'tokenizer.json'} (x{real / stored:.2f} of bytes/4)"
    # a message written later is counted by the workspace's counter and scaled: no re-read
    await ws.send(sid, "and B?")
    assert (await ws.info(sid)).context_tokens == tokens.scaled(stored + tokens.estimate("and B?"), real / stored)

    child = (await ws.fork(sid)).sid  # a fork counts as its parent does
    assert ((await ws.show(child)).tokenizer, (await ws.info(child)).context_tokens) == (
        detail.tokenizer, (await ws.info(sid)).context_tokens)

    await ws.set_tokenizer(sid, "none")
    assert (await ws.info(sid)).context_tokens == stored + tokens.estimate("and B?")
    assert (await ws.show(sid)).tokenizer == "bytes/4"
    # a window the estimator's count fits and the tokenizer's does not: refused when set after it,
    # and said when the tokenizer comes after the window
    await ws.set_tokenizer(sid, str(tmp_path / "tokenizer.json"))
    with pytest.raises(ContextTooLarge):
        await ws.set(sid, window=real)
    await ws.set_tokenizer(sid, "none")
    await ws.set(sid, window=real)
    over = await ws.set_tokenizer(sid, str(tmp_path / "tokenizer.json"))
    assert over.context_tokens > real and "is over the window" in over.notes[0].text


@pytest.mark.parametrize("spec, says", [
    ("/no/such/tokenizer.json", "no tokenizer file at /no/such/tokenizer.json"),
    ("tokenizer.json", "must be an absolute path"),
    ("tiktoken:no_such_encoding", "not available offline here"),
    ("auto", "no tokenizer for openai:m@http://127.0.0.1:9/v1's model is available offline"),
])
async def test_a_tokenizer_that_cannot_be_had_is_refused_in_one_line(ws, tmp_path, spec, says):
    sid = (await ws.spawn("loop", "a", runner="openai:m@http://127.0.0.1:9/v1", cwd=str(tmp_path))).sid
    await ws.send(sid, PROSE)
    before = await ws.show(sid)
    with pytest.raises(InvalidArgument, match=says.replace("?", r"\?")):
        await ws.set_tokenizer(sid, spec)
    after = await ws.show(sid)
    assert (after.tokenizer, after.info.context_tokens) == (before.tokenizer, before.info.context_tokens)


async def test_a_file_that_is_no_tokenizer_is_refused(ws, tmp_path):
    sid = (await ws.spawn("loop", "a", runner="openai:m@http://127.0.0.1:9/v1", cwd=str(tmp_path))).sid
    (tmp_path / "rates.json").write_text('{"A": 0.2}')
    with pytest.raises(InvalidArgument, match="is not a tokenizer.json the tokenizers package can read"):
        await ws.set_tokenizer(sid, str(tmp_path / "rates.json"))


async def test_the_engine_refuses_a_context_over_its_window_as_the_model_counts_it(live, engine, model, tmp_path):
    sid = (await live.spawn("loop", "a", runner=f"openai:m@{model.url_v1}", cwd=str(tmp_path))).sid
    await live.send(sid, PROSE)
    stored = (await live.info(sid)).context_tokens
    tokenizer_json(tmp_path / "tokenizer.json")
    await live.set(sid, window=stored + 10)  # the estimator's count fits; the model's does not
    over = await live.set_tokenizer(sid, str(tmp_path / "tokenizer.json"))
    assert over.context_tokens > stored + 10
    await live.activate(sid)
    run = (await until(lambda: ended(live, sid, 1)))[0]
    assert run.outcome == "failed" and f"its context ({over.context_tokens} tokens) is over its window" in run.error
    assert model.turn_requests() == []
