"""A stdio MCP server with one tool, ``add(a, b)``, for tests that make an agent CLI call MCP.

Standard library only (the suite does not depend on the MCP SDK): newline-delimited JSON-RPC
on stdin/stdout, answering the three requests a client makes (initialize, tools/list,
tools/call) and ignoring notifications. Each call's arguments are appended to the file named
by its argument, when given, so a test can see that the CLI really called it (an argument, as
CLIs give their MCP servers only a few of their own environment variables).

Run it as ``python mcp_calc.py [LOG]``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

TOOL = {"name": "add", "description": "Add two numbers.",
        "inputSchema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                        "required": ["a", "b"]}}


def answer(method: str, params: dict[str, Any]) -> dict[str, Any]:
    if method == "initialize":
        return {"protocolVersion": params.get("protocolVersion", "2025-06-18"), "capabilities": {"tools": {}},
                "serverInfo": {"name": "calc", "version": "1.0"}}
    if method == "tools/list":
        return {"tools": [TOOL]}
    if method == "tools/call":
        args = params.get("arguments", {})
        if len(sys.argv) > 1:
            with open(sys.argv[1], "a") as log:
                log.write(json.dumps(args) + "\n")
        total = args["a"] + args["b"]
        return {"content": [{"type": "text", "text": json.dumps(total)}], "structuredContent": {"result": total},
                "isError": False}
    return {}


def main() -> None:
    for line in sys.stdin:
        message = json.loads(line)
        if "id" not in message:  # a notification
            continue
        reply = {"jsonrpc": "2.0", "id": message["id"], "result": answer(message["method"], message.get("params", {}))}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
