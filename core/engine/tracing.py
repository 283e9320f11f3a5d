"""OpenTelemetry export of what an engine ran, off unless configured.

Each run its engine ended becomes an ``invoke_agent`` span, and each tool call of it an
``execute_tool`` child, following the GenAI semantic conventions as they stand
(``gen_ai_latest_experimental``). The spans are made from the store once the run is recorded
(``Workspace.traced_runs``): what let each call run (``model.allowed``: unasked, the
session's permissions, a rule, a person, refused), what the kernel refused it, and the
waits for a person (span events). One session is one trace, whose id is the session's uuid,
and a run's span id is derived from it: a fork's first run links to the parent's run it forked
after, and a run after a merge to the merged fork's last run, without either being stored.
The host is the resource's ``host.name``.

Export never holds a run up: spans are made after the run is recorded and handed to the
SDK's batch processor, which sends them from its own thread; what a collector that is down
does not take is dropped, counted and said in the engine's log. Prompts, tool inputs and
outputs are exported only when asked (``content``).

Configured by ``[otel]`` in the config file (``endpoint``: an OTLP/HTTP traces address;
``headers``; ``content``), else by the standard variables (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``,
``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_HEADERS``,
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``; ``OTEL_SDK_DISABLED=true`` turns it off).
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import logging
import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, cast

from ..model import allowed, config, runner_spec
from ..model.allowed import ToolUse
from ..model.traces import RunTrace

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

    from ..calls import Workspace

log = logging.getLogger("procession.engine")

#: The keys of ``[otel]``.
OTEL_KEYS: Final = ("endpoint", "headers", "content")
#: Runs read from the store at each look.
LOOKED: Final = 200
#: What a provider's name is, by runner (the GenAI conventions' ``gen_ai.provider.name``).
PROVIDERS: Final = {"claude": "anthropic", "codex": "openai", "openai": "openai"}
#: The outcome of a run that ended well.
OK: Final = "ok"
#: How long closing waits for the last spans to leave.
FLUSH_MS: Final = 3_000


@dataclass(slots=True, frozen=True)
class Settings:
    """Where spans go (an OTLP/HTTP traces endpoint; empty: nowhere, nothing is made), the
    headers sent with them, and whether prompts, tool inputs and outputs go too."""

    endpoint: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    content: bool = False
    problems: tuple[str, ...] = ()


def load(path: Path | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    """``[otel]`` of the config file, else the standard ``OTEL_*`` variables."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return Settings()
    content = env.get("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "").lower() == "true"
    found, problem = config.table("otel", path)
    problems = [problem] if problem else []
    if isinstance(found, dict) and found:
        unknown = sorted(set(found) - set(OTEL_KEYS))
        endpoint, headers = found.get("endpoint", ""), found.get("headers", {})
        if unknown:
            problems.append(f"[otel]: unknown key {unknown[0]!r} (it takes {', '.join(OTEL_KEYS)})")
        if not isinstance(endpoint, str) or not endpoint.startswith(("http://", "https://")):
            return Settings(problems=(*problems, "[otel] endpoint: an http:// or https:// address of an OTLP/HTTP"
                                                 " traces receiver (…/v1/traces); nothing is exported"))
        if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
            return Settings(problems=(*problems, "[otel] headers: a table of texts; nothing is exported"))
        given = found.get("content", content)
        if not isinstance(given, bool):  # "false" is a text, and true
            return Settings(problems=(*problems, "[otel] content: true or false; nothing is exported"))
        return Settings(endpoint, headers, given, tuple(problems))
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
    if not endpoint and env.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        endpoint = env["OTEL_EXPORTER_OTLP_ENDPOINT"].rstrip("/") + "/v1/traces"
    return Settings(endpoint, {}, content, tuple(problems))


def trace_id(session_uuid: str) -> int:
    """A session's trace: its uuid's 128 bits."""
    return uuid.UUID(session_uuid).int or 1


def span_id(session_uuid: str, *parts: object) -> int:
    """A span of a session's trace, derived (a run: ``(run,)``; its tool call ``(run, seq)``):
    the same wherever and whenever it is made, so another span can link to it."""
    digest = hashlib.sha256(":".join(map(str, (session_uuid, *parts))).encode()).digest()
    return int.from_bytes(digest[:8], "big") or 1


_IDS: contextvars.ContextVar[tuple[int, int]] = contextvars.ContextVar("ids", default=(1, 1))


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


class Tracer:
    """Spans of the runs an engine ends, from the store, to an OTLP/HTTP receiver (or to
    ``exporter``: the tests' in-memory one)."""

    def __init__(self, ws: Workspace, settings: Settings, host: str, engine: str, *,
                 exporter: SpanExporter | None = None) -> None:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.id_generator import IdGenerator

        class Given(IdGenerator):
            """The ids the span about to start is to have (``_IDS``): derived, not random."""

            def generate_span_id(self) -> int:
                return _IDS.get()[1]

            def generate_trace_id(self) -> int:
                return _IDS.get()[0]

        if exporter is None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter(endpoint=settings.endpoint, headers=dict(settings.headers) or None,
                                        timeout=FLUSH_MS / 1000)
        self.ws, self.settings, self.engine = ws, settings, engine
        self.counted = _Counting(exporter, settings.endpoint or "the exporter")
        self.provider = TracerProvider(resource=Resource.create({"service.name": "procession", "host.name": host}),
                                       id_generator=Given())
        self.provider.add_span_processor(BatchSpanProcessor(cast("SpanExporter", self.counted),
                                                            export_timeout_millis=FLUSH_MS))
        self.tracer = self.provider.get_tracer("procession")
        self.since = 0.0
        self.done: set[int] = set()  # the runs exported that ended at ``since``

    @property
    def dropped(self) -> int:
        """How many spans a collector did not take."""
        return self.counted.dropped

    async def start(self, since: float) -> None:
        """From now on (``since``: the engine's start): what ended before was the last engine's."""
        self.since = since

    async def poll(self) -> int:
        """Make the spans of the runs ended since the last look; how many runs."""
        found = [t for t in await self.ws.traced_runs(self.engine, self.since, LOOKED) if t.run.id not in self.done]
        for trace in found:
            try:
                self.export(trace)
            except Exception:  # noqa: BLE001 - one run that cannot be traced holds up no other, nor the engine
                log.exception("tracing: the spans of run %d could not be made", trace.run.id)
            ended = trace.run.ended or self.since
            if ended > self.since:
                self.since, self.done = ended, set()
            self.done.add(trace.run.id)
        return len(found)

    def export(self, trace: RunTrace) -> None:
        """One run's spans, handed to the batch processor (never waited for)."""
        from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags, set_span_in_context

        run, sid = trace.run, trace.uuid
        spec = runner_spec.parse(trace.runner) if trace.runner else None
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": trace.agent, "gen_ai.agent.id": trace.agent,
            "gen_ai.conversation.id": sid, "gen_ai.usage.input_tokens": run.tokens_in,
            "gen_ai.usage.output_tokens": run.tokens_out, "procession.session.id": run.session,
            "procession.session.name": trace.name, "procession.run.id": run.id,
            "procession.run.outcome": run.outcome or "", "procession.run.cost_usd": run.cost,
            "procession.run.causes": [str(c.get("kind", "")) for c in run.cause if isinstance(c, dict)],
            "procession.host": trace.host,
        }
        if run.cache_read or run.cache_write:
            attributes["gen_ai.usage.cache_read.input_tokens"] = run.cache_read
            attributes["gen_ai.usage.cache_creation.input_tokens"] = run.cache_write
        if spec is not None:
            attributes["procession.runner"] = spec.kind if spec.kind == "command" else trace.runner.split("#")[0]
            if spec.kind in PROVIDERS:
                attributes["gen_ai.provider.name"] = PROVIDERS[spec.kind]
            if spec.kind != "command" and spec.kind != "builtin" and spec.target:
                attributes["gen_ai.request.model"] = spec.target
        if run.exit_code is not None:
            attributes["procession.run.exit_code"] = run.exit_code
        links = [Link(SpanContext(trace_id(link.uuid), span_id(link.uuid, link.run), True, TraceFlags(TraceFlags.SAMPLED)),
                      {"procession.link": link.kind, "procession.session.id": link.session,
                       **({"procession.run.id": link.run} if link.run is not None else {}),
                       **({"procession.fork_seq": link.at} if link.at is not None else {})})
                 for link in trace.links]
        ended = run.ended or run.started
        token = _IDS.set((trace_id(sid), span_id(sid, run.id)))
        try:
            span = self.tracer.start_span(f"invoke_agent {trace.agent}", kind=SpanKind.INTERNAL, attributes=attributes,
                                          links=links, start_time=_ns(run.started))
        finally:
            _IDS.reset(token)
        for asked in trace.asked:  # what it asked that no tool call answers to
            _waits(span, asked["asked"], asked["answered"], asked["tool"], asked["request"], asked["answer"],
                   asked["by"])
        if run.outcome not in (OK, None):
            span.set_attribute("error.type", run.outcome or "")
            span.set_status(Status(StatusCode.ERROR, (run.error or run.outcome or "").splitlines()[-1][:200]
                                   if run.error or run.outcome else None))
        inside = set_span_in_context(span)
        at = run.started
        for use in trace.tools:
            self._tool(inside, sid, use, at)
            at = max(at, use.created)
        span.end(end_time=_ns(max(ended, at)))

    def _tool(self, inside: Any, sid: str, use: ToolUse, after: float) -> None:
        from opentelemetry.trace import SpanKind, Status, StatusCode

        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": use.name, "gen_ai.tool.type": "function",
            "gen_ai.tool.call.id": use.call_id, "procession.tool.allowed": use.how, "procession.message.seq": use.seq,
        }
        if use.by:
            attributes["procession.tool.allowed_by"] = use.by
        if use.request is not None:
            attributes["procession.request.id"] = use.request
        if use.denied:
            attributes["procession.tool.kernel_denied"] = list(use.denied)
        if self.settings.content:
            attributes["gen_ai.tool.call.arguments"] = json.dumps(use.input, ensure_ascii=False)
        start = min(use.asked if use.asked is not None else after, use.created)
        token = _IDS.set((0, span_id(sid, use.run, use.seq)))
        try:
            span = self.tracer.start_span(f"execute_tool {use.name}", context=inside, kind=SpanKind.INTERNAL,
                                          attributes=attributes, start_time=_ns(start))
        finally:
            _IDS.reset(token)
        if use.asked is not None:
            _waits(span, use.asked, use.answered, use.name, use.request, None if use.how == allowed.WITHDRAWN else
                   ("deny" if use.how == allowed.REFUSED else "allow"), use.by)
        if use.is_error or use.how == allowed.REFUSED:
            span.set_status(Status(StatusCode.ERROR, use.why or "the tool reported an error"))
        span.end(end_time=_ns(use.created))

    def close(self) -> None:
        """Send what is left (a collector that is down or silent: given ``FLUSH_MS``, then dropped)."""
        self.provider.shutdown()


def _waits(span: Any, asked: float, answered: float | None, tool: str, request: int | None, answer: str | None,
           by: str | None) -> None:
    """A wait for a person, as two events: the asking, and the answer (or none)."""
    span.add_event("procession.asked", {"gen_ai.tool.name": tool, "procession.request.id": request or 0},
                   timestamp=_ns(asked))
    if answered is not None:
        span.add_event("procession.answered", {"procession.request.id": request or 0, "procession.answer": answer or "",
                                               "procession.answered_by": by or ""}, timestamp=_ns(answered))


class _Counting:
    """The exporter, counting what it could not send (and saying so once a streak)."""

    def __init__(self, inner: SpanExporter, where: str) -> None:
        self.inner, self.where = inner, where
        self.dropped = 0
        self._failing = False

    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        try:
            result = self.inner.export(spans)
        except Exception:  # noqa: BLE001 - an exporter's failure is counted, never raised into the engine
            result = SpanExportResult.FAILURE
        if result is SpanExportResult.FAILURE:
            self.dropped += len(spans)
            if not self._failing:
                log.warning("tracing: %s did not take %d spans (%d dropped so far); runs go on", self.where,
                            len(spans), self.dropped)
            self._failing = True
        else:
            self._failing = False
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return bool(self.inner.force_flush(timeout_millis))
