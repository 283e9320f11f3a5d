"""The web face's HTTP side: a Starlette app over an open workspace, for paired devices only.

Every request is checked before anything is read: its ``Host`` must be the address the server
was started on (a page of another site that resolves its own name to 127.0.0.1, DNS
rebinding, is refused), and a request that changes something must come from the page itself
(its ``Origin`` ours, and its device's CSRF token in ``X-CSRF``; the cookie is
``SameSite=Strict`` besides). The device is the one its cookie's secret names
(``DeviceCalls.device``): none, or a revoked one, gets 401, and an open stream of a device
revoked meanwhile is closed at its next tick. A read-only device reads. Pairing and answers are
rate-limited (per client address, per device). Answers and calls are the workspace's own,
journaled with actor ``web`` and the device's name as ``who``.

Nothing a session holds is ever sent as markup: the page puts every text in with
``textContent``, and the responses forbid scripts from anywhere but the page's own file
(``Content-Security-Policy``).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from procession.calls import Workspace
from procession.calls.devices import Device
from procession.engine.notify import BUTTON_HEADER
from procession.model import requests
from procession.model.calls import INFO, Call
from procession.model.errors import ProcessionError
from procession.model.records import SessionInfo
from procession.model.states import State
from procession.present import cells, lines, words

COOKIE = "procession_device"
#: How often an open stream sends the state whatever changed (its ages move; and whether its
#: device is still paired), and how often it asks the store whether another process committed
#: anything (a cheap look: SQLite's ``data_version``, PostgreSQL's notifications), sending the
#: state at once when one did.
TICK_S = 1.0
LOOK_S = 0.1
#: Pairing attempts per client address, and answers or calls per device, in a minute.
PAIR_PER_MINUTE = 10
CHANGES_PER_MINUTE = 120
#: The calls a page makes on a session besides answering and sending, with the words every
#: face shows for them (``model.calls.INFO``); one that ends something (``confirm``) asks first.
CALLS = (Call.ACTIVATE, Call.SUSPEND, Call.RESUME, Call.INTERRUPT, Call.CANCEL)
#: The most of a request's input, and of a run's output, a page is sent (characters).
INPUT_MAX = 4000
OUTPUT_MAX = 4000
OUTPUT_CHUNKS = 64  # the rows of a run's output read for its tail
#: The last messages of a session a page shows; the runs finished since a device looked.
MESSAGES_SHOWN = 20
FINISHED_SHOWN = 20
#: The table's columns on a page (the monitor's own cells, ``present.cells``).
COLUMNS = ("state", "agent", "host", "last", "context", "spend", "active")
HERE = Path(__file__).parent
HEADERS = {"Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self';"
                                      " img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
           "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "Cache-Control": "no-store"}


class Limiter:
    """At most ``per_minute`` events per key in any minute."""

    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        self.seen: dict[str, deque[float]] = {}

    def allow(self, key: str) -> bool:
        now = time.monotonic()
        seen = self.seen.setdefault(key, deque())
        while seen and seen[0] < now - 60:
            seen.popleft()
        if len(seen) >= self.per_minute:
            return False
        seen.append(now)
        return True


def refused(status: int, why: str) -> JSONResponse:
    return JSONResponse({"error": why}, status, headers=HEADERS)


def create(ws: Workspace, served: list[str], *, secure: bool) -> Starlette:
    """The app for ``ws``, served at the origins ``served`` (``http://127.0.0.1:8765``); ``secure``: over TLS
    (the cookie is then ``Secure``)."""
    hosts = {o.split("://", 1)[1] for o in served}
    pairing, changes, pressing = Limiter(PAIR_PER_MINUTE), Limiter(CHANGES_PER_MINUTE), Limiter(PAIR_PER_MINUTE)

    def foreign(request: Request, changing: bool) -> str | None:
        """Why a request is not the page's own, if it is not."""
        if request.headers.get("host") not in hosts:
            return "this server answers only at its own address"
        sent = request.headers.get("origin")
        if sent is not None and sent not in served or changing and sent is None:
            return "a request from another site"
        if request.headers.get("sec-fetch-site") not in (None, "same-origin", "none"):
            return "a request from another site"
        return None

    async def who(request: Request) -> Device | None:
        return await ws.device(request.cookies.get(COOKIE, ""))

    def guarded(handler: Callable[[Request, Device], Awaitable[Response]], *, changing: bool = False,
                own: bool = False) -> Callable[[Request], Awaitable[Response]]:
        """``handler`` for paired devices; ``changing``: one that changes something (the page's
        own, with its token), ``own``: of the device's own only (a read-only device may)."""
        async def endpoint(request: Request) -> Response:
            why = foreign(request, changing)
            if why:
                return refused(403, why)
            device = await who(request)
            if device is None:
                return refused(401, "this device is not paired (or was revoked): pair it with procession web --pair")
            if changing:
                if request.headers.get("x-csrf") != device.csrf:
                    return refused(403, "a change without this page's token")
                if device.read_only and not own:
                    return refused(403, f"device {device.name} may only read")
                if not changes.allow(str(device.id)):
                    return refused(429, "too many changes in a minute; wait")
            try:
                return await handler(request, device)
            except ProcessionError as exc:
                return refused(409, str(exc))
        return endpoint

    async def page(request: Request) -> Response:
        why = foreign(request, False)
        if why:
            return refused(403, why)
        name = {"/": "page.html", "/pair": "page.html", "/app.js": "app.js", "/app.css": "app.css"}[request.url.path]
        return FileResponse(HERE / name, headers=HEADERS)

    async def pair(request: Request) -> Response:
        why = foreign(request, True)
        if why:
            return refused(403, why)
        if not pairing.allow(request.client.host if request.client else "?"):
            return refused(429, "too many pairing attempts in a minute; wait")
        try:
            body = await request.json()
            paired = await ws.paired(str(body.get("link", "")) if isinstance(body, dict) else "")
        except (ValueError, ProcessionError) as exc:
            return refused(403, str(exc) if isinstance(exc, ProcessionError) else "a pairing link, as JSON")
        response = JSONResponse({"name": paired.name, "read_only": paired.read_only}, headers=HEADERS)
        response.set_cookie(COOKIE, paired.secret, max_age=400 * 86400, httponly=True, samesite="strict",
                            secure=secure, path="/")
        return response

    async def state(request: Request, device: Device) -> Response:
        return JSONResponse(await _state(ws, device), headers=HEADERS)

    async def session(request: Request, device: Device) -> Response:
        """A session's own page: what the page with it open asks at each state it is sent."""
        sid = request.query_params.get("sid", "")
        found = await _detail(ws, int(sid), time.time()) if sid.isdigit() else None
        return JSONResponse(found, status_code=200 if found else 404, headers=HEADERS)

    async def events(request: Request, device: Device) -> Response:
        async def stream() -> AsyncIterator[str]:
            last: str | None = None
            now: Device | None = device
            seen, due = None, 0.0
            while now is not None:
                version = await ws.store.data_version()
                if version != seen or time.monotonic() >= due:
                    shown = json.dumps(await _state(ws, now))
                    if shown != last:
                        yield f"event: state\ndata: {shown}\n\n"
                        last = shown
                    seen, due = version, time.monotonic() + TICK_S
                await asyncio.sleep(LOOK_S)
                if time.monotonic() >= due:
                    now = await ws.still(device.id)
            yield "event: revoked\ndata: {}\n\n"
        return StreamingResponse(stream(), media_type="text/event-stream", headers=HEADERS)

    async def looked(request: Request, device: Device) -> Response:
        return JSONResponse({"seen": await ws.looked(device.id)}, headers=HEADERS)

    async def answer(request: Request, device: Device) -> Response:
        body = await _body(request)
        acting = ws.as_who(f"{device.name} (web)")
        request_id, how = body.get("request"), body.get("answer")
        if not isinstance(request_id, int) or how not in ("allow", "always", "deny"):
            return refused(400, "an answer names a request (a number) and allow, always or deny")
        if how == "deny":
            done = await acting.deny(request_id, why=str(body.get("why") or ""))
        else:
            done = await acting.allow(request_id, always=how == "always")
        return JSONResponse(done.to_json(), headers=HEADERS)

    async def call(request: Request, device: Device) -> Response:
        body = await _body(request)
        acting = ws.as_who(f"{device.name} (web)")
        sid, name = body.get("sid"), body.get("call")
        named = [str(c) for c in (*CALLS, Call.SEND)]
        if not isinstance(sid, int) or name not in named:
            return refused(400, f"a call names a session (a number) and one of {', '.join(named)}")
        if name == Call.SEND:
            done: Any = await acting.send(sid, str(body.get("text") or ""))
        else:
            done = await getattr(acting, name)(sid)
        return JSONResponse(done.to_json(), headers=HEADERS)

    async def button(request: Request) -> Response:
        """A push's button (``[notify] buttons``), called by the phone's ntfy app: no cookie,
        the request's one-time token in a header (which a page of another site cannot send
        without a preflight this server never answers)."""
        why = foreign(request, False)
        if why:
            return refused(403, why)
        if not pressing.allow(request.client.host if request.client else "?"):
            return refused(429, "too many button presses in a minute; wait")
        how = (await request.body()).decode(errors="replace").strip()
        if how not in ("allow", "deny"):
            return refused(400, "a button answers allow or deny")
        try:
            request_id = await ws.redeem(request.headers.get(BUTTON_HEADER, ""))
            acting = ws.as_who("a push's button (web)")
            done = await (acting.allow(request_id) if how == "allow" else acting.deny(request_id))
        except ProcessionError as exc:
            return refused(409, str(exc))
        return JSONResponse(done.to_json(), headers=HEADERS)

    return Starlette(routes=[
        Route("/", page), Route("/pair", page), Route("/app.js", page), Route("/app.css", page),
        Route("/api/pair", pair, methods=["POST"]),
        Route("/api/state", guarded(state)),
        Route("/api/session", guarded(session)),
        Route("/api/events", guarded(events)),
        Route("/api/answer", guarded(answer, changing=True), methods=["POST"]),
        Route("/api/call", guarded(call, changing=True), methods=["POST"]),
        Route("/api/looked", guarded(looked, changing=True, own=True), methods=["POST"]),
        Route("/api/button", button, methods=["POST"]),
    ])


async def _body(request: Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError:
        raise ProcessionError("the request's body is not JSON") from None
    if not isinstance(body, dict):
        raise ProcessionError("the request's body is not a JSON object")
    return body


def _cells(s: SessionInfo, now: float) -> list[tuple[str, cells.Parts]]:
    return [(cells.BY_KEY[key].title, cells.BY_KEY[key].cell(s, now)) for key in COLUMNS]


async def _state(ws: Workspace, device: Device) -> dict[str, Any]:
    """What the page shows: the requests waiting, the sessions failing, the runs finished since
    the device looked, the table (the same for every page of a device: one stream serves them
    all). Every text is worded here (``present``), as the monitor words it; the page only
    places it."""
    now = time.time()
    pending = await ws.pending()
    sessions = await ws.ps()
    hosts = {s.id: s.host for s in sessions}
    named = {s.id: s.name for s in sessions}
    finished = await ws.ended_runs(device.seen or device.created, FINISHED_SHOWN)
    return {
        "device": {"name": device.name, "read_only": device.read_only}, "csrf": device.csrf,
        "requests": [{"id": r.id, "sid": r.sid, "about": f"session {r.sid} ({r.session}) · agent {r.agent}"
                      + (f" · host {hosts[r.sid]}" if r.sid in hosts else "") + f" · asked {words.ago(r.asked, now)}",
                      "tool": f"{r.tool}: {requests.summary(r.tool, r.input)}"[:INPUT_MAX],
                      "input": json.dumps(r.input, ensure_ascii=False, indent=1)[:INPUT_MAX],
                      "rule": requests.rule_name(r.tool, requests.subject(r.tool, r.input))} for r in pending],
        "failing": [s.id for s in sessions if s.failures and s.last_outcome in ("failed", "timeout")],
        "finished": [{"sid": r.session, "text": f"session {r.session} ({named.get(r.session, '?')}): {r.outcome}"
                      f" {words.ago(r.ended, now)}" + (f" — {words.one_line(r.error, 100)}" if r.error else "")}
                     for r in finished],
        "calls": [{"call": str(c), "summary": INFO[c].summary, "confirm": INFO[c].confirm} for c in CALLS],
        "sessions": [{"id": s.id, "name": s.name, "waiting": s.state is State.WAITING, "cells": _cells(s, now)}
                     for s in sessions],
    }


async def _detail(ws: Workspace, sid: int, now: float) -> dict[str, Any] | None:
    """A session's last messages and what its last run printed (its tail), as ``history`` and
    ``logs`` say them; None for a session there is not."""
    try:
        info = await ws.info(sid)
    except ProcessionError:
        return None
    messages = [m async for batch in ws.history_batches(sid, tail=MESSAGES_SHOWN) for m in batch]
    try:
        run, chunks = await ws.run_log(sid, last=OUTPUT_CHUNKS)
    except ProcessionError:  # no run yet
        return {"sid": sid, "title": lines.title(info), "state": lines.state_text(info),
                "messages": [lines.history_line(m, short=True) for m in messages], "run": None, "output": ""}
    printed = "".join(c.data for c in chunks)[-OUTPUT_MAX:]
    return {"sid": sid, "title": lines.title(info), "state": lines.state_text(info),
            "messages": [lines.history_line(m, short=True) for m in messages],
            "run": lines.run_line(run, now), "output": words.printable(printed)}
