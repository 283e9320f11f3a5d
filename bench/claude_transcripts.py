#!/usr/bin/env python3
"""Reading Claude Code's transcripts (``procession.model.transcripts.claude``): what ``adopt``,
``adopt --all`` and ``sync`` cost.

    python bench/claude_transcripts.py [--tiny] [--reps 7] [--json-out FILE]

Transcripts are made here, in the shape Claude Code 2.1 writes them (one record per content
block, the call's usage repeated, a prompt's two attachment records of ~6 KB, a tool result
record with ``toolUseResult``, queue operations and a ``last-prompt`` per turn). A *round* is
a prompt, a text, two Bash calls (outputs of 1 KB and 6 KB) and a final text.

- *read whole*: ``read`` of one transcript of 150 rounds (~4.8 MB), no position (``adopt``).
- *sync one turn*: a read from the position the whole read gave, after one more round was
  appended (``sync``: the new lines only).
- *sync mid-call*: the same, from a position taken while the last call's tool result was not
  written yet (the whole file is parsed again).
- *adopt --all*: ``discover`` and ``read`` of 500 transcripts of 8 rounds (~260 KB each).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE)]

from report import Results, environment, table  # noqa: E402

from procession.model.transcripts.claude import FORMAT, transcript  # noqa: E402

FULL = {"rounds": 150, "sessions": 500, "session_rounds": 8}
TINY = {"rounds": 5, "sessions": 5, "session_rounds": 2}
LISTING = "- skill: " + "does one thing well, described at length. " * 140  # ~6 KB, as the CLI's listings


class Writer:
    """Records of one session, chained as the CLI chains them."""

    def __init__(self, session: str, cwd: str) -> None:
        self.session, self.cwd, self.parent = session, cwd, None
        self.lines: list[str] = []

    def record(self, kind: str, **fields: Any) -> None:
        uid = str(uuid.uuid4())
        self.lines.append(json.dumps({"parentUuid": self.parent, "isSidechain": False, "type": kind, **fields,
                                      "uuid": uid, "timestamp": "2026-12-01T18:03:55.763Z", "userType": "external",
                                      "entrypoint": "sdk-cli", "cwd": self.cwd, "sessionId": self.session,
                                      "version": "2.1.197", "gitBranch": "HEAD"}, separators=(",", ":")))
        self.parent = uid  # type: ignore[assignment]

    def assistant(self, call: str, block: dict[str, Any]) -> None:
        usage = {"input_tokens": 1200, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 800,
                 "output_tokens": 30}
        self.record("assistant", message={"id": call, "type": "message", "role": "assistant",
                                          "model": "claude-opus-4-8", "content": [block], "stop_reason": None,
                                          "usage": usage})

    def round(self, n: int) -> None:
        prompt = f"please look at part {n} of the project and fix what is wrong there"
        self.lines.append(json.dumps({"type": "queue-operation", "operation": "enqueue", "sessionId": self.session,
                                      "content": prompt}))
        self.record("user", message={"role": "user", "content": prompt})
        for kind in ("agent_listing_delta", "skill_listing"):
            self.record("attachment", attachment={"type": kind, "content": LISTING})
        call = f"msg_{uuid.uuid4().hex[:24]}"
        self.assistant(call, {"type": "text", "text": "Let me look at the files first. " * 6})
        for size in (1024, 6 * 1024):
            tool = f"toolu_{uuid.uuid4().hex[:24]}"
            self.assistant(call, {"type": "tool_use", "id": tool, "name": "Bash",
                                  "input": {"command": f"grep -rn part{n} src | head -{size // 64}"}})
            output = ("src/module.py:12: a line of output that the command printed\n" * (size // 60))[:size]
            self.record("user", message={"role": "user", "content": [
                {"tool_use_id": tool, "type": "tool_result", "content": output, "is_error": False}]},
                toolUseResult={"stdout": output, "stderr": "", "interrupted": False})
            call = f"msg_{uuid.uuid4().hex[:24]}"
        self.assistant(call, {"type": "text", "text": "Fixed: the part now does what it says. " * 8})
        self.lines.append(json.dumps({"type": "last-prompt", "lastPrompt": prompt, "leafUuid": self.parent,
                                      "sessionId": self.session}))

    def text(self) -> str:
        return "".join(line + "\n" for line in self.lines)


def session(env: dict[str, str], cwd: str, rounds: int) -> tuple[Path, Writer]:
    writer = Writer(str(uuid.uuid4()), cwd)
    for n in range(rounds):
        writer.round(n)
    path = Path(transcript(env, cwd, writer.session))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(writer.text())
    return path, writer


def timed(call: Any, reps: int) -> list[float]:
    runs = []
    for _ in range(reps):
        started = time.perf_counter()
        call()
        runs.append(time.perf_counter() - started)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="a few rounds, one run (what the suite runs)")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--json-out")
    args = parser.parse_args()
    sizes, reps = (TINY, 1) if args.tiny else (FULL, args.reps)
    results = Results()
    with tempfile.TemporaryDirectory(prefix="bench-claude-") as tmp:
        root = Path(tmp)
        env = {"CLAUDE_CONFIG_DIR": str(root / "one")}
        path, writer = session(env, "/work/project", sizes["rounds"])
        found = FORMAT.find(env, str(path))
        mb = f"{sizes['rounds']} rounds, {path.stat().st_size / 1e6:.1f} MB"
        results.record("read_whole", "read whole", mb, timed(lambda: FORMAT.read(found), reps),
                       goal="< 0.5 s", check=lambda s: s < 0.5)
        before = FORMAT.read(found).position
        writer.round(sizes["rounds"])
        path.write_text(writer.text())
        grown = FORMAT.find(env, str(path))
        assert len(FORMAT.read(grown, before).messages) == 5  # a round
        results.record("sync_turn", "sync one turn", mb, timed(lambda: FORMAT.read(grown, before), reps),
                       goal="< 10 ms", check=lambda s: s < 0.01)
        position = FORMAT.read(grown, before).position
        writer.round(sizes["rounds"] + 1)
        whole = writer.text()
        first_result = whole.index('"type":"tool_result"', whole.rindex('"queue-operation"'))
        path.write_text(whole[:whole.rindex("\n", 0, first_result) + 1])  # the call made, no result yet
        mid = FORMAT.read(FORMAT.find(env, str(path)), position).position
        path.write_text(whole)
        again = FORMAT.find(env, str(path))
        assert [m.role for m in FORMAT.read(again, mid).messages] == ["tool", "tool", "assistant"]
        results.record("sync_mid_call", "sync mid-call", mb, timed(lambda: FORMAT.read(again, mid), reps))

        many = {"CLAUDE_CONFIG_DIR": str(root / "many")}
        for n in range(sizes["sessions"]):
            session(many, f"/work/project-{n % 25}", sizes["session_rounds"])

        def adopt_all() -> None:
            for each in FORMAT.discover(many):
                FORMAT.read(each)

        results.record("adopt_all", "adopt --all", f"{sizes['sessions']} x {sizes['session_rounds']} rounds",
                       timed(adopt_all, max(1, reps // 3)), goal="< 10 s", check=lambda s: s < 10)
        results.record("discover", "discover", f"{sizes['sessions']} sessions",
                       timed(lambda: list(FORMAT.discover(many)), reps))
    print(table(results.rows))
    report = {"mode": "tiny" if args.tiny else "full", **results.summary(), "environment": environment(root)}
    text = json.dumps(report, indent=1)
    print(text)
    if args.json_out:
        Path(args.json_out).write_text(text)


if __name__ == "__main__":
    main()
