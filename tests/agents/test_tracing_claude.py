"""A real Claude Code run traced to a real OTLP/HTTP receiver (issue 39): no collector is
needed; the test's own small server takes what the engine's exporter sends, protobuf over HTTP,
as a collector would. The run waited for a person, ran its second call by the rule the answer
made, and wrote a file: one ``invoke_agent`` span, an ``execute_tool`` child per call saying
what let it run, the wait as events."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from conftest import engine_on, until
from procession import State, Workspace
from procession.engine import tracing
from procession.model import hosts
from support.agent_clis import AgentSandbox
from support.models import ModelServer, say, shell
from support.runs import finished, state_of

from test_runners import agent_session

pytest.importorskip("opentelemetry.proto")
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: E402
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


class Receiver:
    """An OTLP/HTTP traces receiver on 127.0.0.1: what it was sent, decoded."""

    def __init__(self) -> None:
        got: list[ExportTraceServiceRequest] = []
        self.got = got

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                got.append(request)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def spans(self) -> list[tuple[dict[str, Any], Any]]:
        """Every span received, with its resource's attributes."""
        return [({a.key: _value(a.value) for a in rs.resource.attributes}, span)
                for request in self.got for rs in request.resource_spans for ss in rs.scope_spans for span in ss.spans]


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


def _attrs(span: Any) -> dict[str, Any]:
    return {a.key: _value(a.value) for a in span.attributes}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    yield found
    found.server.shutdown()


async def _waiting(ws: Workspace, sid: int) -> Any:
    found = await ws.pending([sid])
    return found[-1] if found and await state_of(ws, sid) is State.WAITING else None


async def test_a_claude_code_run_that_waited_and_ran_by_a_rule_reaches_an_otlp_receiver(
        claude_sandbox: AgentSandbox, model_server: ModelServer, live: Workspace, db: Any, receiver: Receiver,
        monkeypatch: pytest.MonkeyPatch) -> None:
    command = "echo traced >> traced.txt"
    model_server.script.add(shell(command), shell(command), say("Done."))
    sid = await agent_session(live, claude_sandbox, monkeypatch)
    await live.set(sid, permissions="ask")
    async with engine_on(db, tracing=tracing.Settings(endpoint=receiver.url)) as eng:
        await live.send(sid, "write it twice")
        await live.activate(sid)
        asked = await until(lambda: _waiting(live, sid))
        await live.allow(asked.id, always=True)  # the second, the same command, goes by the rule
        run = await until(lambda: finished(live, sid, 1))
        assert run.outcome == "ok", run.error
        assert (claude_sandbox.workdir / "traced.txt").read_text() == "traced\ntraced\n"
        await until(lambda: eng.tracer is not None and eng.tracer.since >= run.ended)
        eng.tracer.provider.force_flush(10_000)
        await until(lambda: any(s.name.startswith("invoke_agent") for _, s in receiver.spans()))
    uuid = (await live.info(sid)).uuid
    spans = receiver.spans()
    [(resource, agent)] = [(r, s) for r, s in spans if s.name == "invoke_agent dev"]
    assert resource["service.name"] == "procession" and resource["host.name"] == hosts.this()
    assert int.from_bytes(agent.trace_id, "big") == tracing.trace_id(uuid)
    assert int.from_bytes(agent.span_id, "big") == tracing.span_id(uuid, run.id)
    attrs = _attrs(agent)
    assert attrs["gen_ai.conversation.id"] == uuid and attrs["gen_ai.provider.name"] == "anthropic"
    assert attrs["procession.run.outcome"] == "ok" and attrs["gen_ai.usage.output_tokens"] == run.tokens_out
    tools = sorted((s for _, s in spans if s.name == "execute_tool Bash"), key=lambda s: s.start_time_unix_nano)
    assert [_attrs(s)["procession.tool.allowed"] for s in tools] == ["person", "rule"]
    assert all(s.parent_span_id == agent.span_id and s.trace_id == agent.trace_id for s in tools)
    assert [e.name for e in tools[0].events] == ["procession.asked", "procession.answered"]
    assert _attrs(tools[1])["procession.tool.allowed_by"].startswith("rule ")
