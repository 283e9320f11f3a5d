"""The scripted model server on its own, over plain HTTP: what no CLI run shows by itself."""

from __future__ import annotations

import http.client
import json
from typing import Any

from support.models import ModelServer, Script, Usage, http_error, say, shell
from support.wait import HANG_S

TOOLS = [{"name": "Bash", "input_schema": {"type": "object"}}]


def post(server: ModelServer, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    host, port = server.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=HANG_S)
    try:
        connection.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def test_side_requests_are_answered_without_taking_a_turn() -> None:
    with ModelServer(Script(say("the turn"))) as server:
        title = {"messages": [{"role": "system", "content": "You are a title generator. Output a title."},
                              {"role": "user", "content": "hi"}]}
        compaction = {"input": [{"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "You are performing a CONTEXT CHECKPOINT COMPACTION. Summarise."}]}]}
        assert post(server, "/v1/messages", {"messages": [{"role": "user", "content": "title?"}]})[0] == 200
        assert post(server, "/v1/chat/completions", title)[1]["choices"][0]["message"]["content"]
        assert post(server, "/v1/responses", compaction)[1]["output"][0]["content"][0]["text"]
        assert server.script.remaining == 1
        status, reply = post(server, "/v1/messages", {"messages": [{"role": "user", "content": "go"}], "tools": TOOLS})
        assert (status, reply["content"][0]["text"]) == (200, "the turn")
        assert [(r.kind, r.turn) for r in server.requests] == [("side", None), ("title", None), ("compaction", None),
                                                              ("turn", 0)]


def test_each_format_reports_the_scripted_usage_in_its_own_fields() -> None:
    usage = Usage(input=100, output=7, cache_read=5000, cache_write=300)
    with ModelServer(Script(say("a", usage=usage), say("b", usage=usage))) as server:
        anthropic = post(server, "/v1/messages", {"messages": [{"role": "user", "content": "x"}], "tools": TOOLS})[1]
        chat = post(server, "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]})[1]
    assert anthropic["usage"] == {"input_tokens": 100, "output_tokens": 7, "cache_read_input_tokens": 5000,
                                  "cache_creation_input_tokens": 300}
    assert chat["usage"] == {"prompt_tokens": 5400, "completion_tokens": 7, "total_tokens": 5407,
                             "prompt_tokens_details": {"cached_tokens": 5000, "cache_write_tokens": 300}}


def test_a_scripted_error_is_sent_as_the_formats_error_body() -> None:
    with ModelServer(Script(http_error(529, "overloaded"), http_error(400, "bad"))) as server:
        anthropic = post(server, "/v1/messages", {"messages": [], "tools": TOOLS})
        chat = post(server, "/v1/chat/completions", {"messages": []})
    assert anthropic == (529, {"type": "error", "error": {"type": "api_error", "message": "overloaded"}})
    assert chat == (400, {"error": {"message": "bad", "type": "invalid_request_error"}})


def test_a_turn_request_past_the_script_is_answered_and_listed_as_unserved() -> None:
    with ModelServer(Script(shell("true"))) as server:
        first = post(server, "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]})[1]
        second = post(server, "/v1/chat/completions", {"messages": [{"role": "user", "content": "y"}]})[1]
    [call] = first["choices"][0]["message"]["tool_calls"]
    assert json.loads(call["function"]["arguments"])["command"] == "true"
    assert second["choices"][0]["message"]["content"] == ModelServer.EXHAUSTED
    assert [r.turn for r in server.unserved] == [None]
    assert server.requests[0].sent[0].id == call["id"]
