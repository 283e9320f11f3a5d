"""A bare ACP client for tests: an agent started on stdio (`AgentSandbox.start_acp`), spoken to in
JSON-RPC lines, and its whole process tree ended afterwards.

No SDK: the tests pin what goes over the pipe, line by line. Reading has a hang guard
(`HANG_S`), never a verdict: an agent that never answers fails the test with what it wrote on
stderr, instead of blocking the suite.
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import psutil

from support.runs import alive
from support.wait import HANG_S

PROTOCOL_VERSION = 1
#: What a client that can read and write files for the agent, and has no terminal, says it is.
CLIENT_CAPABILITIES: dict[str, Any] = {"fs": {"readTextFile": True, "writeTextFile": True}, "terminal": False}

Message = dict[str, Any]
#: Answers a request the agent sends (``session/request_permission``, ``fs/...``): its result.
Answer = Callable[[Message], Any]


class AgentPipe:
    """The agent's stdin and stdout as JSON-RPC messages. A thread reads stdout, so a test can
    wait for one message with a hang guard; lines that are not JSON are kept in `noise`."""

    def __init__(self, process: subprocess.Popen[bytes], stderr: Path | None = None) -> None:
        assert process.stdin is not None and process.stdout is not None, "start the agent with stdin and stdout piped"
        self.process, self.stderr = process, stderr
        self.notifications: list[Message] = []
        self.noise: list[str] = []
        self._ids = iter(range(1, 1 << 31))
        self._inbox: queue.Queue[Message | None] = queue.Queue()
        threading.Thread(target=self._read, name=f"acp-reader-{process.pid}", daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            line = raw.decode(errors="replace").strip()
            try:
                message = json.loads(line)
            except ValueError:
                message = None
            if isinstance(message, dict):
                self._inbox.put(message)
            elif line:
                self.noise.append(line)
        self._inbox.put(None)

    def send(self, message: Mapping[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")
        self.process.stdin.flush()

    def request(self, method: str, params: Mapping[str, Any]) -> int:
        """Send a request; its id (wait for its answer with `response`)."""
        number = next(self._ids)
        self.send({"id": number, "method": method, "params": dict(params)})
        return number

    def next(self) -> Message:
        """The next message the agent sends (a hang guard, not a verdict, limits the wait)."""
        try:
            message = self._inbox.get(timeout=HANG_S)
        except queue.Empty:
            raise AssertionError(f"the agent sent nothing within {HANG_S}s; stderr: {self._stderr()}") from None
        if message is None:
            self._inbox.put(None)  # the end stays the end for later reads
            raise AssertionError(f"the agent closed its stdout (exit {self.process.poll()}); stderr: {self._stderr()}")
        return message

    def response(self, number: int, answer: Answer | None = None) -> Message:
        """Wait for the answer to request ``number``. Notifications on the way are kept in
        `notifications`; requests of the agent get ``answer(request)`` as their result, or a
        "method not found" error without one."""
        while True:
            message = self.next()
            if "method" not in message:
                if message.get("id") == number:
                    return message
                continue
            if "id" not in message:
                self.notifications.append(message)
            elif answer is None:
                self.send({"id": message["id"], "error": {"code": -32601, "message": "Method not found"}})
            else:
                self.send({"id": message["id"], "result": answer(message)})

    def call(self, method: str, params: Mapping[str, Any], answer: Answer | None = None) -> Any:
        """A request and its result (its error fails the test)."""
        reply = self.response(self.request(method, params), answer)
        assert "error" not in reply, f"{method} failed: {reply['error']}; stderr: {self._stderr()}"
        return reply["result"]

    def initialize(self) -> Any:
        return self.call("initialize", {"protocolVersion": PROTOCOL_VERSION, "clientCapabilities": CLIENT_CAPABILITIES})

    def _stderr(self) -> str:
        return self.stderr.read_text(errors="replace")[-2000:] if self.stderr and self.stderr.exists() else ""


def end_tree(process: subprocess.Popen[bytes]) -> list[int]:
    """SIGKILL the agent and every process under it (listed before any is killed: a launcher's
    child outlives it, reparented), reap the agent, and wait until none is alive (a zombie
    reparented to an init that does not reap is dead). The pids that were in the tree."""
    try:
        root = psutil.Process(process.pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        tree = []
    for member in tree:
        try:
            member.kill()
        except psutil.NoSuchProcess:
            pass
    process.wait(timeout=HANG_S)
    for pipe in (process.stdin, process.stdout):
        if pipe is not None:
            try:
                pipe.close()
            except OSError:  # the agent went with data unread in the pipe
                pass
    pids = [member.pid for member in tree]
    wait_dead(pids)
    return pids


def wait_dead(pids: list[int]) -> None:
    """Return once no process of ``pids`` is alive; fail after `HANG_S` (a hang guard)."""
    deadline = time.monotonic() + HANG_S
    while (still := [pid for pid in pids if alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not still, f"still alive {HANG_S}s after SIGKILL: {still}"


def processes_with_home(home: Path) -> list[int]:
    """Every live process on the machine whose HOME is ``home`` (a sandbox's own): whatever an
    agent left behind, in its tree or reparented out of it."""
    found = []
    for process in psutil.process_iter(["pid"]):
        try:
            if process.environ().get("HOME") == str(home) and alive(process.pid):
                found.append(process.pid)
        except (psutil.Error, OSError):  # gone, a zombie, or not ours to read
            pass
    return found


def allow_once(request: Message) -> Any:
    """The answer of a client that allows each tool call once (picked by the option's kind:
    option ids differ from agent to agent) and reads and writes files for the agent in the
    ordinary way; a missing file reads as empty (Gemini CLI 0.61 fails a new file's write when
    its read is answered with the standard "Resource not found" error)."""
    params = request["params"]
    match request["method"]:
        case "session/request_permission":
            option = next(o for o in params["options"] if o["kind"] == "allow_once")
            return {"outcome": {"outcome": "selected", "optionId": option["optionId"]}}
        case "fs/read_text_file":
            path = Path(params["path"])
            return {"content": path.read_text() if path.exists() else ""}
        case "fs/write_text_file":
            Path(params["path"]).write_text(params["content"])
            return {}
    raise AssertionError(f"the agent asked for {request['method']}, which this client does not offer")


def agent_text(notifications: list[Message], session: str) -> str:
    """What the agent said in ``session``: its ``agent_message_chunk`` texts, joined."""
    return "".join(n["params"]["update"]["content"].get("text", "") for n in notifications
                   if n["method"] == "session/update" and n["params"]["sessionId"] == session
                   and n["params"]["update"].get("sessionUpdate") == "agent_message_chunk")
