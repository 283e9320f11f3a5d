"""Deterministic runners that need nothing installed: ``builtin:NAME[:ARG]``.

They run as real child processes (``python -m procession.runners.builtin NAME ARG``),
reading the same stdin document and answering the same way as any ``command:`` runner, so
that suspend, interrupt and cancel act on them exactly as on a real agent.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from typing import Any


def digest(doc: dict[str, Any]) -> str:
    messages = doc["messages"]
    chars = sum(len(m["content"]) for m in messages)
    h = hashlib.sha256(json.dumps([doc["system"], messages], sort_keys=True).encode("utf-8", "surrogatepass"))
    cause = ", ".join(c.get("kind", "?") for c in doc["run"]["cause"]) or "manual"
    last = messages[-1]["content"] if messages else ""
    last = " ".join(last.split())[:80]
    return (f"digest {h.hexdigest()[:12]}: {len(messages)} messages, {chars} chars, woken by {cause};"
            f" last: {last!r}")


def main(argv: list[str]) -> int:
    name = argv[0] if argv else "digest"
    arg = argv[1] if len(argv) > 1 else ""
    doc = json.loads(sys.stdin.buffer.read() or b"{}")
    if name == "fail":
        print("builtin:fail fails on purpose", file=sys.stderr)
        return 1
    if name == "echo":
        messages = doc.get("messages") or [{"content": ""}]
        print(messages[-1]["content"])
        return 0
    if name == "sleep":
        seconds = float(arg or 5)
        step = min(0.1, seconds) or 0.1
        end = time.monotonic() + seconds
        ticks = 0
        try:
            print("started", flush=True)  # once this is out, an interrupt is handled
            while time.monotonic() < end:
                time.sleep(min(step, max(end - time.monotonic(), 0)))
                ticks += 1
                if ticks % 10 == 0:
                    print(f"working {ticks / 10:.0f}s", flush=True)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            return 130
        print(f"slept {seconds:g}s")
        return 0
    print(digest(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
