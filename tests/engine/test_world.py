"""A run's own world (``world``): what a confined step sees of the machine, tried from inside
real steps as an attacker would, each against the same step with ``--confine off`` (which is
what shows the world is what holds it).

From inside: its ``/dev/pts`` holds no terminal but its own (the test holds one open on the
machine), its ``/proc`` only its own processes (the engine's environment is not there to
read), and under ``--net none`` nothing is reached, by TCP, MPTCP, UDP, an abstract socket or
a unix socket by its path. And a run's own sockets (its
relay to Procession's MCP server, its agent CLI's asking one) are neither in another run's
world nor served to a connection that lacks their key.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from conftest import until
from procession import Workspace
from procession.engine import confinement
from procession.engine.mcp_relay import key_file
from procession.engine.own_mcp import CONNECTIONS
from procession.model import bounds
from support.runs import finished, reach_from_another_run

pytestmark = pytest.mark.skipif(bool(confinement.namespaces()), reason="a run cannot have a world of its own here")

#: What a step sees and reaches: argv: the engine's pid, a TCP port, a UDP port, a unix
#: socket's path and an abstract socket's name, all of the machine's.
LOOK = """
import json, os, socket, sys
engine, tcp, udp, path, abstract = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
out = {"pts": sorted(os.listdir("/dev/pts")), "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit())}
def attempt(name, fn):
    try:
        fn()
        out[name] = "done"
    except OSError as exc:
        out[name] = exc.strerror or str(exc)
def connect(family, kind, proto, where):
    with socket.socket(family, kind, proto) as s:
        s.settimeout(5)
        s.connect(where)
def send_udp():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(b"escaped", ("127.0.0.1", udp))
attempt("environ", lambda: open(f"/proc/{engine}/environ", "rb").read())
attempt("tcp", lambda: connect(socket.AF_INET, socket.SOCK_STREAM, 0, ("127.0.0.1", tcp)))
attempt("mptcp", lambda: connect(socket.AF_INET, socket.SOCK_STREAM, 262, ("127.0.0.1", tcp)))
attempt("udp", send_udp)
attempt("unix", lambda: connect(socket.AF_UNIX, socket.SOCK_STREAM, 0, path))
attempt("abstract", lambda: connect(socket.AF_UNIX, socket.SOCK_STREAM, 0, "\\0" + abstract))
print(json.dumps(out))
"""


class Machine:
    """What the machine offers a step that gets out: a TCP server (counting connections), a UDP
    server (counting datagrams), a unix socket in a folder no session is given, an abstract
    socket, and a terminal held open."""

    def __init__(self, folder: Path) -> None:
        self.tcp = socket.create_server(("127.0.0.1", 0))
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", 0))
        self.udp.settimeout(0.2)
        folder.mkdir()
        self.path = str(folder / "host.sock")
        self.unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.unix.bind(self.path)
        self.unix.listen()
        self.abstract_name = f"procession-test-{os.getpid()}-{id(self)}"
        self.abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.abstract.bind("\0" + self.abstract_name)
        self.abstract.listen()
        self.terminal = os.openpty()
        self.accepted = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        try:
            while True:
                self.tcp.accept()[0].close()
                self.accepted += 1
        except OSError:
            pass

    def datagrams(self) -> int:
        got = 0
        try:
            while self.udp.recv(64):
                got += 1
        except OSError:
            pass
        return got

    def argv(self) -> str:
        return (f"{os.getpid()} {self.tcp.getsockname()[1]} {self.udp.getsockname()[1]} {self.path}"
                f" {self.abstract_name}")

    def close(self) -> None:
        for s in (self.tcp, self.udp, self.unix, self.abstract):
            s.close()
        for fd in self.terminal:
            os.close(fd)


@pytest.fixture
def machine(tmp_path: Path) -> object:
    made = Machine(tmp_path / "outside")
    yield made
    made.close()


async def look(live: Workspace, tmp_path: Path, machine: Machine, name: str, **settings: str
               ) -> tuple[int, dict[str, object]]:
    work = tmp_path / name
    work.mkdir()
    (work / "look.py").write_text(LOOK)
    sid = (await live.spawn(name, "a", runner=f"command:{sys.executable} look.py {machine.argv()}", cwd=str(work),
                            **settings)).sid
    await live.activate(sid)
    run = await until(lambda: finished(live, sid))
    assert run.outcome == "ok", run.error
    said: dict[str, object] = json.loads((await live.history(sid))[-1].content)
    return sid, said


async def test_a_run_sees_no_terminal_no_process_and_no_network_but_its_own(
        live: Workspace, engine: object, tmp_path: Path, machine: Machine) -> None:
    sid, said = await look(live, tmp_path, machine, "inside", net=bounds.NONE)
    assert said["pts"] == ["ptmx"]  # the machine's terminals, the test's own included, are not there
    pids = said["pids"]
    assert isinstance(pids, list) and len(pids) <= 4 and os.getpid() not in pids  # its init, itself, its child
    unseen = "No such file or directory"
    assert said["environ"] == unseen
    assert said["unix"] == unseen
    assert said["abstract"] == "Connection refused"
    assert said["tcp"] == "Permission denied" and said["mptcp"] == "Protocol not supported"
    # (its datagram is sent: to nobody, below)
    assert machine.accepted == 0 and machine.datagrams() == 0
    assert (await live.info(sid)).confinement == confinement.said_here(bounds.NONE)


async def test_the_same_step_unconfined_reaches_all_of_it(live: Workspace, engine: object, tmp_path: Path,
                                                          machine: Machine) -> None:
    """The control: the same step with ``--confine off`` reaches each of them."""
    _, said = await look(live, tmp_path, machine, "free", confine=bounds.OFF, net=bounds.NONE)
    assert len(said["pts"]) > 1  # type: ignore[arg-type]
    assert os.getpid() in said["pids"]  # type: ignore[operator]
    assert {said[k] for k in ("environ", "tcp", "mptcp", "udp", "unix", "abstract")} == {"done"}
    await until(lambda: machine.accepted >= 2)
    assert machine.datagrams() == 1


async def test_under_net_model_only_plain_tcp_to_its_ports_and_udp(
        live: Workspace, engine: object, tmp_path: Path, machine: Machine) -> None:
    """The machine's network, held by Landlock's TCP rules (no port was given here) and to the
    sockets those rules hold: MPTCP does not get past them."""
    _, said = await look(live, tmp_path, machine, "model", net=bounds.MODEL)
    assert said["tcp"] == "Permission denied" and said["mptcp"] == "Protocol not supported"
    assert said["udp"] == "done" and machine.datagrams() == 1  # what --net model leaves (a resolver needs it)
    assert machine.accepted == 0


async def test_under_net_any_a_run_still_sees_only_its_own(live: Workspace, engine: object, tmp_path: Path,
                                                            machine: Machine) -> None:
    """Its network is the machine's (``--net any``), its view of processes, terminals and
    unix sockets by path is still its own."""
    _, said = await look(live, tmp_path, machine, "any", net=bounds.ANY)
    assert said["pts"] == ["ptmx"] and os.getpid() not in said["pids"]  # type: ignore[operator]
    assert said["environ"] == said["unix"] == "No such file or directory"
    assert said["tcp"] == said["mptcp"] == said["udp"] == "done"


async def test_where_no_world_can_be_made_bound_says_so_and_strict_does_not_run(
        live: Workspace, engine: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel that allows no user namespaces (this machine does: the answer is taken from
    the probe): ``bound`` runs with Landlock alone and says what it cannot hold; ``strict``
    does not run."""
    monkeypatch.setattr(confinement, "namespaces", lambda: "user namespaces are not allowed here")
    bound = (await live.spawn("bound", "a", runner="command:echo ran", cwd=str(tmp_path), net=bounds.NONE)).sid
    strict = (await live.spawn("strict", "a", runner="command:echo ran", cwd=str(tmp_path), confine="strict")).sid
    for sid in (bound, strict):
        await live.activate(sid)
    ran = await until(lambda: finished(live, bound))
    refused = await until(lambda: finished(live, strict))
    assert ran.outcome == "ok"
    said = (await live.info(bound)).confinement
    assert said.startswith(f"landlock ABI {confinement.kernel()}") and "no world of its own" in said
    assert "UDP is not limited" in said
    assert refused.outcome == "failed"
    assert "--confine strict: a run cannot have a world of its own here: user namespaces" in refused.error


#: A session that holds its run open until told, after saying where its temporary folder is.
HOLD = "command:echo $TMPDIR > tmp.txt; while [ ! -e stop ]; do sleep 0.05; done; echo held"


async def test_a_runs_relay_socket_is_not_in_another_runs_world_nor_served_without_its_key(
        live: Workspace, engine: object, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Finding: each session's relay socket path was in ``/proc/*/cmdline``, and any run could
    connect to it and act as that session on Procession's MCP server."""
    attacker_dir = tmp_path / "attacker"
    attacker_dir.mkdir()
    victim, sock = await holding_its_relay(live, tmp_path / "victim")
    said = await reach_from_another_run(live, str(sock), str(attacker_dir))
    assert said == "key No such file or directory\nsocket No such file or directory"

    # A process outside every world (an unconfined run, or anything of the user's): no key, no server.
    caplog.set_level(logging.WARNING, logger="procession.engine")
    assert await asyncio.to_thread(talk, sock, b"0" * 32) == b""
    assert any("its mcp-0 socket was refused: it did not present the run's key" in r.getMessage()
               for r in caplog.records)
    answered = await asyncio.to_thread(talk, sock, Path(key_file(str(sock))).read_bytes())
    assert json.loads(answered)["id"] == 1  # the key is what it takes: the run's own relay is served
    (tmp_path / "victim" / "stop").touch()
    await until(lambda: finished(live, victim))


async def test_a_runs_connections_are_capped(live: Workspace, engine: object, tmp_path: Path,
                                             caplog: pytest.LogCaptureFixture) -> None:
    """Finding: each connection to a session's MCP socket started a server process, with no cap
    (10 connections: 749 MB). Its own key does not get a run more than ``CONNECTIONS``."""
    caplog.set_level(logging.WARNING, logger="procession.engine")
    sid, sock = await holding_its_relay(live, tmp_path / "held")
    key = Path(key_file(str(sock))).read_bytes()
    held = [socket.socket(socket.AF_UNIX) for _ in range(CONNECTIONS + 2)]
    try:
        answered = []
        for conn in held:  # each one open, and answered, before the next
            conn.settimeout(30)
            conn.connect(str(sock))
            conn.sendall(key + HELLO.encode())
            answered.append(await asyncio.to_thread(first_line, conn))
        assert [bool(a) for a in answered] == [True] * CONNECTIONS + [False, False]
        assert sum("as many connections as it may" in r.getMessage() for r in caplog.records) == 2
    finally:
        for conn in held:
            conn.close()
    (tmp_path / "held" / "stop").touch()
    await until(lambda: finished(live, sid))


#: An MCP client's first request.
HELLO = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}) + "\n"


async def holding_its_relay(live: Workspace, folder: Path) -> tuple[int, Path]:
    """A session bound to Procession's MCP server whose run is held open; its relay socket."""
    folder.mkdir()
    sid = (await live.spawn(folder.name, "a", runner=HOLD, cwd=str(folder))).sid
    await live.bind(sid, "mcp", "procession")
    await live.activate(sid)
    await until(lambda: (folder / "tmp.txt").exists() and (folder / "tmp.txt").read_text().strip())
    sock = Path((folder / "tmp.txt").read_text().strip()) / "mcp-0.sock"
    assert sock.exists()
    return sid, sock


def first_line(conn: socket.socket) -> bytes:
    """What came back on ``conn`` up to its first line (b"": closed unanswered)."""
    got = b""
    try:
        while b"\n" not in got and (chunk := conn.recv(65536)):
            got += chunk
    except ConnectionResetError:  # closed with what it was sent unread
        pass
    return got


def talk(sock: Path, key: bytes) -> bytes:
    """Connect, present ``key``, say hello: the first line of the answer."""
    with socket.socket(socket.AF_UNIX) as conn:
        conn.settimeout(30)
        conn.connect(str(sock))
        conn.sendall(key + HELLO.encode())
        return first_line(conn)


def test_as_an_unprivileged_user_the_launcher_makes_the_same_world(machine: Machine) -> None:
    """Every run starts through the launcher: run as a user with no privilege (``nobody``, with
    Debian's own Python: the launcher needs the standard library only), it makes the same world,
    and the same step without it reaches the machine (the control)."""
    if os.geteuid() != 0:
        pytest.skip("the suite runs unprivileged already: every other test here is this one")
    python = "/usr/bin/python3"
    runuser = shutil.which("runuser", path="/usr/sbin:/sbin:/usr/bin:/bin")
    if not (os.access(python, os.X_OK) and runuser):
        pytest.skip("needs the system's python3 and runuser")
    launcher = Path(confinement.LAUNCHER)
    if any(not os.stat(p).st_mode & 0o005 for p in [launcher, *launcher.parents]):
        pytest.skip(f"{launcher} is not readable by another user here")
    folder = Path(tempfile.mkdtemp(prefix="procession-world-"))
    folder.chmod(0o755)
    try:
        for name in ("work", "tmp", "home"):
            (folder / name).mkdir()
            os.chown(folder / name, 65534, 65534)
        (folder / "work" / "look.py").write_text(LOOK)
        env = {"PATH": "/usr/bin:/bin", "HOME": str(folder / "home"), "LANG": "C.UTF-8"}
        held = confinement.for_run(confine=bounds.BOUND, net=bounds.NONE, workdir=str(folder / "work"), resources=[], env=env,
                                   tmp=str(folder / "tmp"))
        step = [python, "look.py", *machine.argv().split()]
        said = {}
        for kind, argv in (("world", held.wrap(step)), ("free", step)):
            argv = [python if a == sys.executable else a for a in argv]
            done = subprocess.run([runuser, "-u", "nobody", "--", *argv], cwd=folder / "work", env=env, capture_output=True,
                                  text=True, timeout=60)
            assert done.returncode == 0, done.stderr
            said[kind] = json.loads(done.stdout)
        assert said["world"]["pts"] == ["ptmx"] and len(said["free"]["pts"]) > 1
        assert os.getpid() not in said["world"]["pids"] and os.getpid() in said["free"]["pids"]
        assert said["world"]["mptcp"] == "Protocol not supported" and said["free"]["mptcp"] == "done"
        assert said["world"]["tcp"] == "Permission denied" and said["free"]["tcp"] == "done"
        assert said["world"]["abstract"] == "Connection refused" and said["free"]["abstract"] == "done"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_a_path_that_became_a_link_since_it_was_checked_is_not_in_the_world(tmp_path: Path) -> None:
    """The engine resolves a run's paths; one that has a link on its way by the time the world
    is made (another run swapped a folder for a link to a secret) is left out, not followed."""
    (tmp_path / "secrets" / "data").mkdir(parents=True)
    (tmp_path / "secrets" / "data" / "key").write_text("TOP-SECRET")
    (tmp_path / "shared").symlink_to("secrets")  # ``shared`` was a folder when checked
    for name in ("work", "home"):
        (tmp_path / name).mkdir()
    base = confinement.for_run(confine=bounds.BOUND, net=bounds.ANY, workdir=str(tmp_path / "work"), resources=[],
                               env={"PATH": os.environ["PATH"], "HOME": str(tmp_path / "home")}, tmp=str(tmp_path / "work"))
    assert base.policy is not None
    raw = dataclasses.replace(base.policy, read=(*base.policy.read, str(tmp_path / "shared" / "data")))
    key = tmp_path / "shared" / "data" / "key"
    step = confinement.Bounds(bounds.BOUND, bounds.ANY, raw, "").wrap(["/bin/sh", "-c", f"cat {key} || true"])
    done = subprocess.run(step, cwd=tmp_path / "work", capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "TOP-SECRET" not in done.stdout and "No such file or directory" in done.stderr


KEYS = """
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
found = libc.syscall(250, 10, -3, b"user", sys.argv[1].encode(), 0)  # KEYCTL_SEARCH in the session keyring
added = libc.syscall(248, b"user", b"planted_by_step", b"x", 1, -3)  # add_key to the session keyring
print(found > 0, added > 0)
"""


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the test's system call numbers are x86_64's")
async def test_a_run_has_a_keyring_of_its_own(live: Workspace, engine: object, tmp_path: Path) -> None:
    """Found by an attack pass: a step read the person's session keyring (a login's tokens) and
    planted a key the engine and every later run would see."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    name = f"person_secret_{os.getpid()}"
    assert libc.syscall(248, b"user", name.encode(), b"hunter2", 7, -3) > 0  # in this process's session keyring
    (tmp_path / "keys.py").write_text(KEYS)
    sid = (await live.spawn("keys", "a", runner=f"command:{sys.executable} keys.py {name}", cwd=str(tmp_path))).sid
    await live.activate(sid)
    await until(lambda: finished(live, sid))
    assert (await live.history(sid))[-1].content == "False True"  # it has a keyring: its own, empty
    assert libc.syscall(250, 10, -3, b"user", b"planted_by_step", 0) < 0  # nothing reached the engine's


#: What a step does to the workspace it finds in its folder: argv "write" or "look".
OWN = """
import json, os, sys
out = {"read": len(open("ws.db", "rb").read()), "agents": sorted(os.listdir("agents")),
       "web": sorted(os.listdir("ws.db.web"))}
if sys.argv[1] == "write":
    mark = ("XQ" * 3 + str(12345 * 7)).encode()  # in no command line the workspace keeps
    for name in ("ws.db", "ws.db-wal", "ws.db-journal", "agents/planted", "ws.db.web/planted"):
        try:
            with open(name, "ab") as fh:
                fh.write(mark)
            out[name] = "written"
        except OSError as exc:
            out[name] = exc.strerror
print(json.dumps({"type": "message", "content": json.dumps(out)}))
"""


async def test_a_workspace_kept_in_a_runs_folder_is_not_in_its_world(live: Workspace, engine: object, db: Path,
                                                                       tmp_path: Path) -> None:
    """A workspace kept in the folder its sessions work in (``--db ./ws.db``): a run there reads
    none of its database, writes none of it, can put no file of SQLite's beside it (a WAL or a
    journal SQLite would replay), sees no session's agent folder and not the web face's key.
    The same step with ``--confine off`` reads them (the control)."""
    assert db.parent == tmp_path
    (tmp_path / "own.py").write_text(OWN)
    other = tmp_path / "agents" / "someone-else" / "claude"
    other.mkdir(parents=True)
    (other / "settings.json").write_text('{"hooks": {}}')
    (tmp_path / "ws.db.web").mkdir()
    (tmp_path / "ws.db.web" / "key.pem").write_text("the web face's key")
    said = {}
    for name, confine, act in (("inside", bounds.BOUND, "write"), ("free", bounds.OFF, "look")):
        sid = (await live.spawn(name, "a", runner=f"command:{sys.executable} own.py {act}", cwd=str(tmp_path),
                                confine=confine)).sid
        await live.activate(sid)
        run = await until(lambda: finished(live, sid))
        assert run.outcome == "ok", run.error
        said[name] = json.loads((await live.history(sid))[-1].content)
    inside = said["inside"]
    assert inside["read"] == 0 and inside["agents"] == [] and inside["web"] == []
    assert all(inside[name] == "written" for name in ("ws.db", "ws.db-wal", "ws.db-journal"))  # ...to nothing
    mark = ("XQ" * 3 + str(12345 * 7)).encode()
    for path in [*tmp_path.glob("ws.db*"), *tmp_path.glob("agents/**/*"), *tmp_path.glob("ws.db.web/*")]:
        assert path.is_dir() or mark not in path.read_bytes(), path
    assert (tmp_path / "ws.db-journal").stat().st_size == 0  # made empty before the run could make it
    assert not (tmp_path / "agents" / "planted").exists() and not (tmp_path / "ws.db.web" / "planted").exists()
    assert len(await live.ps()) == 2  # the workspace is whole
    free = said["free"]
    assert free["read"] > 0 and free["agents"] == ["someone-else"] and free["web"] == ["key.pem"]
