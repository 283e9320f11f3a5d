"""What a session may touch: its runs' environment, and the kernel's confinement of every
process they start, tried as a hostile step would (real processes under real Landlock).

A step writes a marker inside its folder, then tries to leave: write a key into a home's
``.ssh`` (a home of the test's own, the session's ``HOME``), write ``/etc``, write a folder
beside its own, read a file it was not given. Each attempt must fail with EACCES, leave no
trace, and be said in the run's record; the same step with ``--confine off`` does get out
(which is what shows the confinement is what held it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import until
from procession import Workspace
from procession.engine import confinement
from procession.model import bounds
from support.runs import finished

#: A step that does its own work, then tries each way out and says what happened.
ATTEMPTS = """
import json, os, sys
out = {}
def attempt(name, fn):
    try:
        fn()
        out[name] = "done"
    except OSError as exc:
        out[name] = exc.strerror
attempt("inside", lambda: open("inside.txt", "w").write("mine"))
attempt("ssh", lambda: open(os.path.join(os.environ["HOME"], ".ssh", "x"), "w").write("key"))
attempt("etc", lambda: open("/etc/procession-escape-" + sys.argv[1], "w").write("x"))
attempt("sibling", lambda: open(os.path.join(sys.argv[2], "x"), "w").write("x"))
attempt("secret", lambda: open(sys.argv[3]).read())
print(json.dumps(out))
for name, said in out.items():
    if said != "done":
        print(f"{name}: {said}", file=sys.stderr)
"""


@pytest.fixture
def world(tmp_path: Path) -> dict[str, Path]:
    """A session's folder, a home with an ``.ssh``, a sibling folder, a secret nobody bound."""
    paths = {name: tmp_path / name for name in ("work", "home", "sibling")}
    for path in paths.values():
        path.mkdir()
    (paths["home"] / ".ssh").mkdir()
    paths["secret"] = tmp_path / "secret.txt"
    paths["secret"].write_text("TOP-SECRET")
    paths["script"] = paths["work"] / "attempts.py"
    paths["script"].write_text(ATTEMPTS)
    return paths


def attempts_runner(world: dict[str, Path], tag: str) -> str:
    return (f"command:{sys.executable} {world['script']} {tag} {world['sibling']} {world['secret']}")


def no_trace(world: dict[str, Path], tag: str) -> None:
    assert not (world["home"] / ".ssh" / "x").exists()
    assert not Path(f"/etc/procession-escape-{tag}").exists()
    assert not (world["sibling"] / "x").exists()


@pytest.fixture(autouse=True)
def clean_etc(request: pytest.FixtureRequest) -> object:
    """Should a test fail open, what it wrote into /etc goes."""
    yield
    for path in Path("/etc").glob("procession-escape-*"):
        path.unlink()


pytestmark = pytest.mark.skipif(confinement.kernel() < 1, reason="this kernel has no Landlock")


async def test_a_confined_step_does_its_work_and_nothing_else(live: Workspace, engine: object,
                                                             world: dict[str, Path]) -> None:
    sid = (await live.spawn("hostile", "a", runner=attempts_runner(world, "bound"), cwd=str(world["work"]),
                            env={"HOME": str(world["home"])})).sid
    await live.activate(sid)
    run = await until(lambda: finished(live, sid))
    said = json.loads((await live.history(sid))[-1].content)
    unseen = "Permission denied" if confinement.namespaces() else "No such file or directory"  # not in its world
    assert said == {"inside": "done", "ssh": unseen, "etc": "Permission denied", "sibling": unseen, "secret": unseen}
    assert (world["work"] / "inside.txt").read_text() == "mine"
    no_trace(world, "bound")
    assert run.outcome == "ok" and run.error is not None
    assert ("its bounds denied: ssh: Permission denied; etc: Permission denied" if confinement.namespaces()
            else "its bounds denied: etc: Permission denied") in run.error
    info = await live.info(sid)
    assert info.confine == "bound" and info.net == "any" and info.confinement == confinement.said_here(bounds.ANY)


async def test_the_same_step_unconfined_gets_out(live: Workspace, engine: object, world: dict[str, Path]) -> None:
    sid = (await live.spawn("free", "a", runner=attempts_runner(world, "off"), cwd=str(world["work"]),
                            env={"HOME": str(world["home"])}, confine="off")).sid
    await live.activate(sid)
    await until(lambda: finished(live, sid))
    said = json.loads((await live.history(sid))[-1].content)
    assert said["sibling"] == "done" and said["ssh"] == "done" and said["secret"] == "done"
    assert (await live.info(sid)).confinement.startswith("off")


async def test_what_a_step_starts_stays_inside_its_bounds(live: Workspace, engine: object,
                                                        world: dict[str, Path]) -> None:
    """A grandchild in a session of its own, started with setsid, is confined as its parent."""
    target = world["sibling"] / "from-a-grandchild"
    sid = (await live.spawn("forker", "a", cwd=str(world["work"]),
                            runner=f"command:setsid sh -c 'echo x > {target}; echo $? > done'; sleep 0.5")).sid
    await live.activate(sid)
    await until(lambda: finished(live, sid))
    await until(lambda: (world["work"] / "done").exists())
    assert not target.exists() and (world["work"] / "done").read_text().strip() != "0"


async def test_a_step_signals_nothing_outside_its_run(live: Workspace, engine: object, world: dict[str, Path]) -> None:
    """Landlock scopes signals (ABI 6): the engine, or any process of another run, is out of reach
    (and in a world of its own, not even there)."""
    if confinement.kernel() < 6:
        pytest.skip("this kernel's Landlock cannot scope signals")
    sid = (await live.spawn("killer", "a", cwd=str(world["work"]),
                            runner=f"command:kill -0 {os.getpid()} 2> said || true; cat said")).sid
    await live.activate(sid)
    await until(lambda: finished(live, sid))
    said = "Operation not permitted" if confinement.namespaces() else "No such process"
    assert said in (await live.history(sid))[-1].content


async def test_a_step_sees_only_its_sessions_environment(live: Workspace, engine: object, world: dict[str, Path],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing of the engine's environment reaches a step unless its session passes it: a secret
    exported where the engine runs, and a CLI's endpoint variable, stay out."""
    monkeypatch.setenv("MY_SECRET_X", "s3cr3t-value")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/decoy")
    show = "command:echo \"[$MY_SECRET_X] [$ANTHROPIC_BASE_URL] [$TMPDIR]\"; env | sort > env.txt"
    given = (await live.spawn("not given", "a", runner=show, cwd=str(world["work"]))).sid
    passed = (await live.spawn("passed", "a", runner=show, cwd=str(world["work"]), passed=["MY_SECRET_X"])).sid
    for sid in (given, passed):
        await live.activate(sid)
        await until(lambda sid=sid: finished(live, sid))
    shown = (await live.history(given))[-1].content
    assert shown.startswith("[] [] [/") and "procession-run-" in shown
    assert (await live.history(passed))[-1].content.startswith("[s3cr3t-value] []")
    names = {line.split("=", 1)[0] for line in (world["work"] / "env.txt").read_text().splitlines()}
    assert names <= {"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TERM", "COLORTERM", "TZ",
                     "TMPDIR", "TMP", "TEMP", "PWD", "SHLVL", "_", "OLDPWD", "MY_SECRET_X", "PROCESSION_SESSION",
                     "PROCESSION_DB", "PROCESSION_RUN"} | {n for n in names if n.startswith("LC_")}


async def test_a_runs_temporary_folder_is_its_own_and_goes_with_it(live: Workspace, engine: object,
                                                                   world: dict[str, Path]) -> None:
    sid = (await live.spawn("temp", "a", cwd=str(world["work"]),
                            runner="command:echo x > $TMPDIR/mine && echo $TMPDIR")).sid
    await live.activate(sid)
    await until(lambda: finished(live, sid))
    folder = Path((await live.history(sid))[-1].content.strip())
    assert folder.name.startswith(f"procession-run-{sid}-") and not folder.exists()


def hang_up_on_each(server: socket.socket) -> None:
    """Accepts each connection and closes it, until the server closes."""
    with contextlib.suppress(OSError):
        while True:
            server.accept()[0].close()


async def test_network_none_and_model(live: Workspace, engine: object, world: dict[str, Path]) -> None:
    """``--net none`` refuses every TCP connection; ``--net model`` those to ports but its model's
    and its bound services'. Two servers listen on 127.0.0.1; one is bound as the session's URL."""
    if confinement.kernel() < 4:
        pytest.skip("this kernel's Landlock cannot restrict TCP")
    servers = [socket.create_server(("127.0.0.1", 0)) for _ in range(2)]
    for server in servers:
        threading.Thread(target=hang_up_on_each, args=(server,), daemon=True).start()
    bound_port, other_port = (s.getsockname()[1] for s in servers)
    probe = (f"command:{sys.executable} -c \"import socket\nfor p in ({bound_port}, {other_port}):\n"
             f"    try:\n        socket.create_connection(('127.0.0.1', p), 5).close(); print(p, 'ok')\n"
             f"    except OSError as e:\n        print(p, e.strerror)\"")
    said = {}
    for net in ("none", "model", "any"):
        sid = (await live.spawn(f"net {net}", "a", runner=probe, cwd=str(world["work"]), net=net)).sid
        await live.bind(sid, "url", f"http://127.0.0.1:{bound_port}/")
        await live.activate(sid)
        await until(lambda sid=sid: finished(live, sid))
        said[net] = (await live.history(sid))[-1].content
    assert said["none"] == f"{bound_port} Permission denied\n{other_port} Permission denied"
    assert said["model"] == f"{bound_port} ok\n{other_port} Permission denied"
    assert said["any"] == f"{bound_port} ok\n{other_port} ok"
    for server in servers:
        server.close()


async def test_a_folder_that_opens_the_home_or_the_system_never_bounds_a_run(
        live: Workspace, engine: object, world: dict[str, Path]) -> None:
    """A session working in its home folder (a transcript or a snapshot may say so) would hand a
    step every key there: the run does not start, and says why."""
    sid = (await live.spawn("at home", "a", runner="command:echo hi", cwd=str(world["home"]),
                            env={"HOME": str(world["home"])})).sid
    await live.activate(sid)
    run = await until(lambda: finished(live, sid))
    assert run.outcome == "failed" and "it is your home folder" in run.error
    wide = (await live.spawn("etc", "a", runner="command:echo hi", cwd=str(world["work"]))).sid
    await live.bind(wide, "folder", "/etc", mode="rw")
    await live.activate(wide)
    run = await until(lambda: finished(live, wide))
    assert run.outcome == "failed" and "inside the system folder /etc" in run.error


async def test_where_the_kernel_cannot_confine_bound_says_so_and_strict_does_not_run(
        live: Workspace, engine: object, world: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel without Landlock (this machine has one: the answer is taken from the probe)."""
    monkeypatch.setattr(confinement, "kernel", lambda: 0)
    bound = (await live.spawn("bound", "a", runner="command:echo ran", cwd=str(world["work"]))).sid
    strict = (await live.spawn("strict", "a", runner="command:echo ran", cwd=str(world["work"]),
                               confine="strict")).sid
    for sid in (bound, strict):
        await live.activate(sid)
    ran = await until(lambda: finished(live, bound))
    refused = await until(lambda: finished(live, strict))
    assert ran.outcome == "ok" and (await live.info(bound)).confinement.startswith("none: this kernel has no Landlock")
    assert refused.outcome == "failed" and "--confine strict: this kernel has no Landlock" in refused.error
    assert [m.content for m in await live.history(strict)] == []


async def test_an_openai_tool_process_is_confined_too(live: Workspace, engine: object, world: dict[str, Path]) -> None:
    """The ``openai:`` loop's bound command runs within the session's bounds."""
    from support.models import ModelServer, Script, say, tool_call

    with ModelServer(Script()) as model:
        sid = (await live.spawn("loop", "a", runner=f"openai:m@{model.url_v1}", cwd=str(world["work"]),
                                env={"HOME": str(world["home"])})).sid
        await live.bind(sid, "tool", f"attempts={sys.executable} {world['script']} tool {world['sibling']}"
                                     f" {world['secret']}")
        model.script.add(tool_call("attempts", {}), say("done"))
        await live.send(sid, "go")
        await live.activate(sid)
        await until(lambda: finished(live, sid))
    [tool] = [m for m in await live.history(sid) if m.role == "tool"]
    said = json.loads(next(line for line in tool.meta["tool"]["output"].splitlines() if line.startswith("{")))
    unseen = "Permission denied" if confinement.namespaces() else "No such file or directory"
    assert said == {"inside": "done", "ssh": unseen, "etc": "Permission denied", "sibling": unseen, "secret": unseen}
    no_trace(world, "tool")


async def test_spawn_set_show_and_ps_carry_the_bounds(ws: Workspace, tmp_path: Path) -> None:
    sid = (await ws.spawn("s", "a", cwd=str(tmp_path))).sid
    assert (await ws.info(sid)).confine == "bound" and (await ws.info(sid)).net == "any"
    changed = await ws.set(sid, confine="strict", net="model")
    assert changed.changed == ("confine", "net")
    row = (await ws.ps())[0].to_json()
    assert (row["confine"], row["net"], row["confinement"]) == ("strict", "model", None)
    fork = (await ws.fork(sid, "f")).sid
    assert ((await ws.info(fork)).confine, (await ws.info(fork)).net) == ("strict", "model")
    from procession.model.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match="--confine takes strict, bound, off"):
        await ws.set(sid, confine="loose")


def test_the_cli_sets_and_shows_the_bounds(cli: object, tmp_path: Path) -> None:
    cli("spawn", "s", "--agent", "a", "--confine", "strict", "--net", "none")  # type: ignore[operator]
    shown = cli("show", "1").stdout  # type: ignore[operator]
    assert "bounds     strict (its bindings), net none" in shown
    cli("set", "1", "--confine", "off")  # type: ignore[operator]
    assert cli.json("ps")[0]["confine"] == "off"  # type: ignore[attr-defined]
    bad = cli("set", "1", "--net", "some", check=False)  # type: ignore[operator]
    assert bad.returncode == 2 and "invalid choice: 'some'" in bad.stderr


def test_the_launcher_never_runs_a_program_unconfined_that_was_to_be(tmp_path: Path) -> None:
    """A policy it cannot read, or one the kernel cannot hold (a requirement beyond its ABI):
    exit 126, a line saying why, and the program never ran."""
    from procession.kernel import landlock

    marker = tmp_path / "ran"
    launch = [sys.executable, "-I", "-S", confinement.LAUNCHER]
    bad = subprocess.run([*launch, "-x", "what", "--", "touch", str(marker)], capture_output=True, text=True)
    assert bad.returncode == 126 and "cannot confine the step: usage" in bad.stderr and not marker.exists()
    lacking = "net" if confinement.kernel() < 4 else "scope" if confinement.kernel() < 6 else None
    if lacking:
        held = subprocess.run([*launch, "-q", lacking, "--", "touch", str(marker)], capture_output=True, text=True)
        assert held.returncode == 126 and "cannot" in held.stderr and not marker.exists()
    system = landlock.command_line(["/usr", "/bin", "/lib", "/lib64"], [str(tmp_path)], [], True, ["scope"])
    ok = subprocess.run([*launch, *system, "--", "touch", str(marker)])
    assert ok.returncode == 0 and marker.exists()
    outside = subprocess.run([*launch, *system, "--", "touch", "/etc/procession-escape-launcher"], capture_output=True)
    assert outside.returncode != 0 and not Path("/etc/procession-escape-launcher").exists()


def test_every_run_reads_the_system_but_its_secrets() -> None:
    read = confinement._system()
    assert "/etc/passwd" in read and "/etc/shadow" not in read and "/etc/ssh/ssh_config" in read
    assert not any(p.startswith("/etc/ssh/ssh_host") for p in read)


async def test_a_bound_mcp_or_command_names_the_programs_a_run_may_read(tmp_path: Path) -> None:
    """A person's command line says what runs: the programs it names by path are read (their
    folder), never the home folder itself."""
    tool = tmp_path / "tools" / "net.py"
    tool.parent.mkdir()
    tool.write_text("print(1)")
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (home / "helper.py").write_text("print(2)")
    (home / "notes.txt").write_text("data")
    held = confinement.for_run(confine="bound", net="any", workdir=str(work), env={"HOME": str(home)},
                               tmp=str(work), resources=[
                                   {"kind": "tool", "uri": f"net=python3 {tool} {home / 'notes.txt'}", "mode": "rw"},
                                   {"kind": "mcp", "uri": f"stdio:python3 {home / 'helper.py'}", "mode": "rw"}])
    assert held.policy is not None
    assert str(tool.parent) in held.policy.read and str(home / "helper.py") in held.policy.read
    assert str(home) not in held.policy.read + held.policy.write
    assert str(home / "notes.txt") not in held.policy.read  # data: only a binding gives it


def test_run_environment_takes_the_base_and_the_runners_names_only(monkeypatch: pytest.MonkeyPatch) -> None:
    from procession.engine.engine import run_environment

    for name, value in {"PATH": "/bin", "HOME": "/h", "LC_ALL": "C", "CLAUDE_CONFIG_DIR": "/h/c",
                        "ANTHROPIC_BASE_URL": "http://decoy", "ANTHROPIC_API_KEY": "k", "AWS_SECRET": "x",
                        "CODEX_HOME": "/h/x", "HTTPS_PROXY": "http://proxy"}.items():
        monkeypatch.setenv(name, value)
    row = {"env": json.dumps({"ANTHROPIC_BASE_URL": "http://mine"}), "pass_env": json.dumps(["ANTHROPIC_API_KEY"])}
    env = run_environment(row, "claude", "/t", {"PROCESSION_SESSION": "1"})
    assert env["ANTHROPIC_BASE_URL"] == "http://mine" and env["ANTHROPIC_API_KEY"] == "k"
    assert env["CLAUDE_CONFIG_DIR"] == "/h/c" and env["HTTPS_PROXY"] == "http://proxy" and env["TMPDIR"] == "/t"
    assert "AWS_SECRET" not in env and "CODEX_HOME" not in env
    command = run_environment({"env": None, "pass_env": None}, "command", "/t", {})
    assert "HTTPS_PROXY" not in command and "CLAUDE_CONFIG_DIR" not in command and command["LC_ALL"] == "C"


async def test_a_runs_end_is_recorded_whatever_breaks_after_its_step(live: Workspace, engine: object,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    """A failure after the step ended (reading the agent's transcript, say) must not leave the
    run open and the session running."""
    from procession.engine.runners import protocol

    def broken(self: protocol.Reader) -> protocol.Events:
        raise RuntimeError("cannot read the end")

    monkeypatch.setattr(protocol.Reader, "close", broken)
    sid = (await live.spawn("s", "a", runner="command:echo hi", cwd=str(tmp_path))).sid
    await live.activate(sid)
    run = await until(lambda: finished(live, sid))
    assert "the engine could not read the end of the run: RuntimeError: cannot read the end" in run.error
    assert (await live.info(sid)).state.value == "sleeping"


async def test_a_step_started_while_the_engine_reaps_orphans_is_not_killed(
        live: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine looks for orphans to reap every sample; a step it is starting meanwhile is not
    one (it died of SIGKILL before it ran: 'exit -9', most often after a restart)."""
    from conftest import engine_on
    import procession.engine.engine as engine_module

    monkeypatch.setattr(engine_module, "SAMPLE_S", 0.0005)
    sids = [(await live.spawn(f"s{i}", "a", runner="command:true", cwd=str(tmp_path))).sid for i in range(30)]
    async with engine_on(live.path, slots=4):
        for sid in sids:
            await live.activate(sid)
        for sid in sids:
            await until(lambda sid=sid: finished(live, sid))
    runs = await live.runs(None, 100)
    assert [(r.outcome, r.exit_code) for r in runs if r.outcome != "ok"] == []


async def test_launching_is_safe_when_asyncio_is_slow(monkeypatch: pytest.MonkeyPatch) -> None:
    """``reaper.starting`` holds while a process is started, whatever awaits it takes."""
    from procession.engine import reaper

    with reaper.starting():
        await asyncio.sleep(0)
        assert reaper.reap() == []


#: A step in a fork's git worktree: commits there, then tries the repository's hooks and configuration.
IN_WORKTREE = """
import json, os, subprocess
out = {}
def git(*args):
    return subprocess.run(["git", *args], capture_output=True, text=True)
open("new.txt", "w").write("from the fork\\n")
out["add"] = git("add", "new.txt").returncode
done = git("-c", "user.name=Fork", "-c", "user.email=fork@example.invalid", "commit", "-qm", "the fork's commit")
out["commit"] = done.stderr.strip() if done.returncode else 0
common = git("rev-parse", "--path-format=absolute", "--git-common-dir").stdout.strip()
for name in ("hooks/pre-commit", "config"):
    try:
        open(os.path.join(common, name), "a").write("x")
        out[name] = "done"
    except OSError as exc:
        out[name] = exc.strerror
print(json.dumps(out))
"""


async def test_a_fork_commits_in_its_worktree_and_cannot_touch_the_repositorys_hooks_or_config(
        live: Workspace, engine: object, tmp_path: Path) -> None:
    from support.git import Repo

    repo = Repo.init(tmp_path / "proj")
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "commit.py").write_text(IN_WORKTREE)
    env = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    parent = (await live.spawn("parent", "a", runner=f"command:{sys.executable} {tmp_path / 'tools' / 'commit.py'}",
                               cwd=str(repo.path), env=env)).sid
    fork = (await live.fork(parent, "side", worktree=True)).sid
    await live.activate(fork)
    run = await until(lambda: finished(live, fork))
    said = json.loads((await live.history(fork))[-1].content)
    assert said == {"add": 0, "commit": 0, "hooks/pre-commit": "Permission denied", "config": "Permission denied"}, run
    assert repo.git("log", "-1", "--format=%s", "procession/side") == "the fork's commit"
    assert not (repo.path / ".git" / "hooks" / "pre-commit").exists()


def test_no_run_is_given_a_path_of_the_engines_own_proc() -> None:
    """``/etc/mtab`` leads to ``/proc/self/mounts``, which is the engine's own entry where it
    is resolved: a run's policy names none of the engine's ``/proc`` (an attack pass saw it)."""
    held = confinement.for_run(confine="bound", net="any", workdir="/tmp", resources=[],
                               env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"}, tmp="/tmp", writes=False)
    assert held.policy is not None
    assert not [p for p in (*held.policy.read, *held.policy.write) if p.startswith(f"/proc/{os.getpid()}")]


def test_a_step_interrupted_as_its_launcher_starts_leaves_no_traceback(tmp_path: Path) -> None:
    """A Ctrl-C that comes while the launcher's Python starts (before the program runs) ends it
    with no traceback, which the run would keep as its error (issue 35)."""
    held = confinement.for_run(confine="bound", net="any", workdir=str(tmp_path), resources=[],
                               env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"}, tmp=str(tmp_path))
    said = []
    for n in range(30):
        step = subprocess.Popen(held.wrap(["/bin/sleep", "0.3"]), cwd=tmp_path, stderr=subprocess.PIPE,
                                start_new_session=True)
        time.sleep(0.002 * (n % 10))  # at different moments of its start
        os.killpg(step.pid, signal.SIGINT)
        try:
            said.append(step.communicate(timeout=30)[1].decode())
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(step.pid, signal.SIGKILL)
    assert not [s for s in said if "Traceback" in s]
