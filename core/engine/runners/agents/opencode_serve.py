"""opencode driven through ``opencode serve`` (its HTTP API and event stream), for a session
whose agent must ask before what it may not do unasked (``--permissions ask``): ``opencode run``
answers its own permission requests (it rejects them, or with ``--auto`` allows them), the
server holds them for its client.

Measured on 1.18.33: the server prints ``opencode server listening on http://127.0.0.1:PORT``
when it is ready (``--port 0`` tries 4096 first, so the port is read, never assumed), answers
only with the run's password (``OPENCODE_SERVER_PASSWORD``: no other process of the machine
may drive it), and does not end with its stdin. The engine, outside the run's bounds, then
follows ``GET /event`` (server-sent events of the session's folder), opens the session
(``POST /session``; a fork ``POST /session/ID/fork``, whose copied messages' parts are then
told again and left out; a resumed one is used as it is), and
sends the prompt (``POST /session/ID/prompt_async``). Parts arrive as ``message.part.updated``:
a finished text, tool or step part is read as ``opencode run`` prints it (``OpencodeReader``).
A tool the configuration says asks (``opencode.ASK``) arrives as ``permission.asked`` and waits
until ``POST /permission/ID/reply`` says ``once``, or ``reject`` with the reason as its message
(the model is told it, and goes on; a reject without one would end the turn). The turn is over
at ``session.idle`` after the session was busy: the reader hangs up, and the server is ended.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Final

from .base import Conversation, Turn
from .opencode import OpencodeReader, folder

if TYPE_CHECKING:
    import httpx

LISTENING: Final = re.compile(rb"listening on (http://127\.0\.0\.1:\d+)")
#: What an id put in a URL path may be (a session's from a snapshot, a request's from the stream):
#: never ``..`` or a ``/`` that would name another endpoint.
ID: Final = re.compile(r"[A-Za-z0-9_-]{1,200}")
#: The user name its server takes with the run's password.
USER: Final = "opencode"


class OpencodeServeReader(OpencodeReader):
    """The server's stdout (where it listens), then its API, followed by the engine."""

    def __init__(self, turn: Turn) -> None:
        super().__init__(turn)
        self.talk = Conversation()
        self.talk.terminate = True  # it outlives its stdin
        self.url: str | None = None
        self.busy = False
        self.copied: set[str] = set()  # the messages a fork's session was made with: its parent's, not this run's

    def _line(self, raw: bytes) -> None:
        found = LISTENING.search(raw) if self.url is None else None
        if found:
            self.url = found.group(1).decode()
            assert self.talk is not None
            self.talk.start(self._follow(self.url))

    async def _follow(self, url: str) -> None:
        """The turn, from opening the event stream to the session's idle."""
        import httpx  # only the engine, once a run drives a server: not every command's start

        assert self.talk is not None
        try:
            async with httpx.AsyncClient(base_url=url, auth=httpx.BasicAuth(USER, self.turn.secret),
                                         params={"directory": folder(self.turn)},
                                         timeout=httpx.Timeout(60.0, read=None)) as client:
                async with client.stream("GET", "/event") as stream:
                    stream.raise_for_status()
                    events = _events(stream.aiter_lines())
                    async for event in events:
                        if event.get("type") == "server.connected":
                            break
                    await self._start(client)
                    async for event in events:
                        if self._followed(client, event):
                            break
        except (httpx.HTTPError, ValueError) as exc:
            self.pending.problems.append(f"opencode serve: {type(exc).__name__}: {exc}")
        finally:
            self.talk.hang_up()

    async def _start(self, client: httpx.AsyncClient) -> None:
        """Open the session (new, a fork's copy, or the one resumed) and send it the prompt."""
        ref = self.turn.ref or {}
        if ref and not ID.fullmatch(str(ref.get("id"))):
            raise ValueError(f"the agent's session id {str(ref.get('id'))[:80]!r} is not an opencode id")
        if not ref:
            session = (await _ok(client.post("/session", json={})))["id"]
        elif ref.get("fork"):
            session = (await _ok(client.post(f"/session/{ref['id']}/fork", json={})))["id"]
            copied = await _ok(client.get(f"/session/{session}/message"))
            self.copied = {str((m.get("info") or {}).get("id")) for m in copied or [] if isinstance(m, dict)}
        else:
            session = str(ref["id"])
        self._announce(str(session))
        body: dict[str, Any] = {"parts": [{"type": "text", "text": self.turn.prompt}]}
        provider, _, model = self.turn.model.partition("/")
        if model:
            body["model"] = {"providerID": provider, "modelID": model}
        await _ok(client.post(f"/session/{session}/prompt_async", json=body))

    def _followed(self, client: httpx.AsyncClient, event: dict[str, Any]) -> bool:
        """Read one event of the stream; True when the turn is over."""
        kind, props = event.get("type"), event.get("properties") or {}
        if not isinstance(props, dict) or props.get("sessionID") != self.session:
            return False
        if kind == "session.status":
            self.busy = self.busy or (props.get("status") or {}).get("type") == "busy"
        elif kind == "session.idle":
            return self.busy
        elif kind == "message.part.updated":
            part = props.get("part")
            printed = _printed(part) if isinstance(part, dict) and part.get("messageID") not in self.copied else None
            if printed:  # a finished part, as ``opencode run`` prints it
                self.event({"type": printed, "sessionID": self.session, "part": part})
        elif kind == "session.error":
            self.event({"type": "error", "sessionID": self.session, "error": props.get("error") or {}})
        elif kind == "permission.asked" and isinstance(props.get("id"), str) and ID.fullmatch(props["id"]):
            assert self.talk is not None
            self.talk.start(self._decide(client, props))
        return False

    async def _decide(self, client: httpx.AsyncClient, asked: dict[str, Any]) -> None:
        """Ask a person (``Turn.decide``) and give the server the answer."""
        import httpx

        assert self.turn.decide is not None
        metadata = asked.get("metadata")
        ok, why = await self.turn.decide(str(asked.get("permission") or "tool"),
                                         metadata if isinstance(metadata, dict) else {})
        reply = {"reply": "once"} if ok else {"reply": "reject", "message": why}  # a message: the turn goes on
        try:
            await _ok(client.post(f"/permission/{asked['id']}/reply", json=reply))
        except (httpx.HTTPError, ValueError) as exc:
            self.pending.problems.append(f"opencode serve: the answer to {asked['id']} was refused: {exc}")


def _printed(part: dict[str, Any]) -> str | None:
    """The event ``opencode run`` prints for a part once it is finished (None: not yet, or none)."""
    kind = part.get("type")
    if kind == "text":
        return "text" if (part.get("time") or {}).get("end") else None
    if kind == "tool":
        return "tool_use" if (part.get("state") or {}).get("status") in ("completed", "error") else None
    return "step_finish" if kind == "step-finish" else None


async def _ok(sent: Any) -> Any:
    """The JSON a request answered (None for no content); an error status raises."""
    response: httpx.Response = await sent
    response.raise_for_status()
    return response.json() if response.content else None


async def _events(lines: AsyncIterator[str]) -> AsyncIterator[dict[str, Any]]:
    """Server-sent events, each a ``data:`` JSON object."""
    data: list[str] = []
    async for line in lines:
        if line.startswith("data:"):
            data.append(line[5:].lstrip())
        elif not line and data:
            event = json.loads("\n".join(data))
            data = []
            if isinstance(event, dict):
                yield event
