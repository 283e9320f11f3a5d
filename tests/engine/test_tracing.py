"""OpenTelemetry export (issue 39): each run an ``invoke_agent`` span, each tool call an
``execute_tool`` child saying what let it run, waits for a person as events, forks and merges
as links; a real engine, the ``openai:`` loop and the scripted model, the SDK's in-memory
exporter. What a collector that is down does not take is dropped and counted, and the run
goes on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import engine_on, until
from procession.engine import tracing
from procession.model import hosts
from support.models import say, tool_call
from test_asking import asking_session, model  # noqa: F401  (the scripted model, a fixture)
from test_asking import ended as _ended
from test_asking import waiting as _waiting

pytest.importorskip("opentelemetry.sdk")
from opentelemetry.sdk.trace.export import SpanExportResult  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402


def _spans(exporter: InMemorySpanExporter, eng: Any) -> list[Any]:
    eng.tracer.provider.force_flush(5_000)
    return list(exporter.get_finished_spans())


async def test_a_run_its_tool_calls_what_let_them_run_its_waits_and_its_forks_and_merges_are_spans(
        live, db, model, tmp_path: Path) -> None:
    exporter = InMemorySpanExporter()
    async with engine_on(db, exporter=exporter) as eng:
        sid, _ = await asking_session(
            live, model, tmp_path, tool_call("data_read", {"path": "a.txt"}),
            tool_call("data_write", {"path": "b.txt", "content": "b"}),
            tool_call("data_write", {"path": "c.txt", "content": "c"}), say("done"))
        request = await until(lambda: _waiting(live, sid))
        await live.allow(request.id, always=True)
        [run] = await until(lambda: _ended(live, sid, 1))
        await until(lambda: [s for s in _spans(exporter, eng) if s.name.startswith("invoke_agent")])
        spans = _spans(exporter, eng)
        [agent] = [s for s in spans if s.name == "invoke_agent a"]
        session = await live.info(sid)
        assert agent.context.trace_id == tracing.trace_id(session.uuid)
        assert agent.context.span_id == tracing.span_id(session.uuid, run.id)
        attrs = dict(agent.attributes)
        assert attrs["gen_ai.operation.name"] == "invoke_agent" and attrs["gen_ai.conversation.id"] == session.uuid
        assert attrs["gen_ai.agent.name"] == "a" and attrs["gen_ai.request.model"] == "m"
        assert attrs["gen_ai.provider.name"] == "openai" and attrs["procession.run.outcome"] == "ok"
        assert attrs["gen_ai.usage.input_tokens"] == run.tokens_in and attrs["gen_ai.usage.output_tokens"] == run.tokens_out
        assert agent.resource.attributes["host.name"] == hosts.this()
        tools = sorted((s for s in spans if s.name.startswith("execute_tool")), key=lambda s: s.start_time)
        assert [(s.name, s.attributes["procession.tool.allowed"]) for s in tools] == [
            ("execute_tool data_read", "unasked"), ("execute_tool data_write", "person"),
            ("execute_tool data_write", "rule")]
        assert all(s.parent is not None and s.parent.span_id == agent.context.span_id for s in tools)
        assert hosts.who() in tools[1].attributes["procession.tool.allowed_by"]
        assert tools[2].attributes["procession.tool.allowed_by"] == f"rule {(await live.rules(sid))[0].id}"
        assert [e.name for e in tools[1].events] == ["procession.asked", "procession.answered"]
        assert tools[1].events[0].timestamp <= tools[1].events[1].timestamp <= tools[1].end_time
        assert "gen_ai.tool.call.arguments" not in tools[0].attributes  # content only when asked for
        assert list(attrs["procession.run.causes"]) == [c["kind"] for c in run.cause]  # what woke it, not its words
        assert agent.start_time <= tools[0].start_time and tools[-1].end_time <= agent.end_time

        fork = (await live.fork(sid)).sid
        model.script.add(say("the fork's turn"))
        await live.send(fork, "and you")
        await live.activate(fork)
        await until(lambda: _ended(live, fork, 1))
        await live.merge(fork, sid)
        model.script.add(say("after the merge"))
        await live.send(sid, "once more")
        await live.activate(sid)
        [_, second] = await until(lambda: _ended(live, sid, 2))
        forked = await live.info(fork)
        await until(lambda: len([s for s in _spans(exporter, eng) if s.name.startswith("invoke_agent")]) == 3)
        spans = {s.context.span_id: s for s in _spans(exporter, eng) if s.name.startswith("invoke_agent")}
        fork_run = spans[tracing.span_id(forked.uuid, (await live.runs(fork))[0].id)]
        [link] = fork_run.links
        assert (link.context.trace_id, link.context.span_id) == (agent.context.trace_id, agent.context.span_id)
        assert link.attributes["procession.link"] == "forked from"
        after = spans[tracing.span_id(session.uuid, second.id)]
        [merged] = after.links
        assert (merged.context.trace_id, merged.context.span_id) == (fork_run.context.trace_id, fork_run.context.span_id)
        assert merged.attributes["procession.link"] == "merged from"


class _Down:
    """A collector that is not there."""

    def __init__(self) -> None:
        self.tried = 0

    def export(self, spans: Any) -> SpanExportResult:
        self.tried += 1
        return SpanExportResult.FAILURE

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 0) -> bool:
        return True


async def test_a_collector_that_is_down_costs_the_runs_nothing_and_what_it_missed_is_counted(live, db) -> None:
    down = _Down()
    async with engine_on(db, exporter=down) as eng:
        sids = [(await live.spawn(f"s{i}", "a", runner="command:true")).sid for i in range(3)]
        for sid in sids:
            await live.activate(sid)
        for sid in sids:
            [run] = await until(lambda sid=sid: _ended(live, sid, 1))
            assert run.outcome == "ok"
        eng.tracer.provider.force_flush(5_000)
        await until(lambda: eng.tracer.dropped >= 3)
    assert down.tried >= 1


def test_settings_come_from_otel_in_the_config_file_else_the_standard_variables(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    assert tracing.load(config, {}).endpoint == ""
    assert tracing.load(config, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318/"}).endpoint == \
        "http://127.0.0.1:4318/v1/traces"
    assert tracing.load(config, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/t",
                                 "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"}).content
    assert tracing.load(config, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_SDK_DISABLED": "true"}).endpoint == ""
    config.write_text('[otel]\nendpoint = "https://collector:4318/v1/traces"\nheaders = {authorization = "Bearer t"}\n'
                      'content = true\n')
    found = tracing.load(config, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://ignored"})
    assert (found.endpoint, dict(found.headers), found.content, found.problems) == (
        "https://collector:4318/v1/traces", {"authorization": "Bearer t"}, True, ())
    config.write_text('[otel]\nendpoint = "http://c:4318/v1/traces"\ncontent = "false"\n')
    assert not tracing.load(config, {}).endpoint and "content" in tracing.load(config, {}).problems[0]
    config.write_text('[otel]\nendpoint = "collector:4318"\nfrobnicate = 1\n')
    refused = tracing.load(config, {})
    assert refused.endpoint == "" and any("endpoint" in p for p in refused.problems)
    assert any("frobnicate" in p for p in refused.problems)
