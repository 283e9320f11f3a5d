"""One step of a chaos session: it misbehaves in a way picked from its run id.

    command:python3 chaos_step.py TAG

Every process it starts carries ``TAG`` on its command line, so that ``chaos.py`` can find
any that escaped the engine. A step that means to succeed writes ``done/RUN`` in its folder
(the session's: a confined step writes nowhere else) after its reply is out (a reply
``reply-RUN.``); ``chaos.py`` then expects the reply in the history unless the engine died
too soon after to record it, or a call ended the session first.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time

BEHAVIOURS = ("events", "plain", "slow", "orphan", "pipe_holder", "no_env", "flood", "no_stdin", "fail",
              "hang", "garbage", "deep_json", "many_children", "exit_early")


def run_id() -> int:
    """The run id, reading no more of the document than it takes (steps that do not read
    their input are part of the test)."""
    seen = b""
    while len(seen) < 1 << 20:
        chunk = os.read(0, 4096)
        if not chunk:
            break
        seen += chunk
        found = re.search(rb'"run": \{"id": (\d+)', seen)
        if found:
            return int(found.group(1))
    sys.exit(9)


def sleeper(tag: str, **kw: object) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", tag], **kw)  # type: ignore[call-overload]


def event(**kw: object) -> None:
    sys.stdout.write(json.dumps(kw) + "\n")
    sys.stdout.flush()


def done(run: int, *, events: bool = True) -> None:
    if events:
        event(type="message", role="assistant", content=f"reply-{run}.")
        event(type="memory", set={f"run_{run}": run})
        event(type="usage", **{"in": 100 + run, "out": 7})
    else:
        sys.stdout.write(f"reply-{run}.\n")
        sys.stdout.flush()
    mark(run)


def mark(run: int) -> None:
    """The reply is out: from here on, the engine owes it a place in the history."""
    path = os.path.join(os.getcwd(), "done", str(run))
    with open(f"{path}.tmp", "w") as fh:  # whole or absent: a step may be killed mid-write
        fh.write(str(time.time()))
    os.replace(f"{path}.tmp", path)


def main() -> None:
    tag = sys.argv[1]
    run = run_id()
    rng = random.Random(run)
    behaviour = BEHAVIOURS[rng.randrange(len(BEHAVIOURS))]
    with open(os.path.join(os.getcwd(), "started", str(run)), "w") as fh:
        fh.write(behaviour)
    if behaviour not in ("no_stdin", "flood", "exit_early"):
        sys.stdin.buffer.read()
    match behaviour:
        case "events":
            event(type="message", role="assistant", content=f"thinking about run {run}")
            done(run)
        case "plain":
            done(run, events=False)
        case "slow":
            for i in range(3):
                event(type="message", role="assistant", content=f"step {i} of run {run}")
                time.sleep(rng.uniform(0.3, 1.5))
            done(run)
        case "orphan":  # a child in a session of its own, left behind
            sleeper(tag, start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL)
            done(run)
        case "pipe_holder":  # a grandchild keeps stdout and stderr open after the leader exits
            sleeper(tag, start_new_session=True)
            done(run)
        case "no_env":  # a child with no environment at all (no marker to find it by)
            sleeper(tag, env={}, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            done(run)
        case "flood":  # 8 MiB of output, its input never read
            sys.stdout.write(f"reply-{run}.\n")
            for _ in range(8 * 1024):
                sys.stdout.write("x" * 1023 + "\n")
            sys.stdout.flush()
            mark(run)
        case "no_stdin":
            os.close(0)
            done(run)
        case "fail":
            sys.stderr.write("chaos: failing on purpose\n" * 50)
            sys.exit(3)
        case "hang":  # deaf to SIGTERM; only the run timeout, a cancel or SIGKILL ends it
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            event(type="message", role="assistant", content=f"run {run} hangs")
            time.sleep(600)
        case "garbage":
            event(type="message", role="assistant", content=f"run {run} \x1b[8mhidden\x1b[0m \x07")
            sys.stdout.write("not json at all\n{\"type\": \"memory\", \"set\": [1, 2]}\n\x00\x00\xff\n")
            sys.stdout.write("y" * (2 << 20))  # a 2 MiB line, no newline
            sys.stdout.flush()
        case "deep_json":
            sys.stdout.write(json.dumps({"type": "memory", "set": {"deep": "[" * 1000 + "]" * 1000}}) + "\n")
            sys.stdout.write('{"type": "memory", "set": {"deep": ' + "[" * 1000 + "]" * 1000 + "}}\n")
            sys.stdout.write('{"type": "usage", "in": 1' + "0" * 5000 + "}\n")
            sys.stdout.flush()
        case "many_children":
            for _ in range(20):
                sleeper(tag, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            done(run)
        case "exit_early":  # exits before the engine has written its input
            sys.exit(0)


if __name__ == "__main__":
    main()
