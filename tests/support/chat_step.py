"""A ``command:`` runner for the contract tests: reads the step document, asks the scripted
model server's chat endpoint (its URL the first argument) with the session's messages, and
prints the reply as a message event. Standard library only."""

from __future__ import annotations

import json
import sys
import urllib.request


def main() -> None:
    step = json.load(sys.stdin)
    messages = [{"role": m["role"], "content": m["content"]} for m in step["messages"]
                if m["role"] in ("user", "assistant")]
    body = json.dumps({"model": "scripted", "messages": messages, "stream": True}).encode()
    request = urllib.request.Request(f"{sys.argv[1]}/chat/completions", body, {"Content-Type": "application/json"})
    text = ""
    with urllib.request.urlopen(request) as answer:  # streamed: a held reply holds the step mid-request
        for line in answer:
            data = line.decode().strip().removeprefix("data:").strip()
            if data.startswith("{"):
                for choice in json.loads(data).get("choices") or []:
                    text += (choice.get("delta") or {}).get("content") or ""
    print(json.dumps({"type": "message", "role": "assistant", "content": text}))


if __name__ == "__main__":
    main()
