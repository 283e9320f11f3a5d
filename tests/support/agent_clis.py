"""The real agent CLIs (Claude Code, Codex CLI, opencode) for tests, offline.

Each CLI is found where ``tests/agents/install`` put it: in ``$PROCESSION_AGENT_CLIS`` (the
install's cache folder) when that is set, else on PATH (``.ci/run`` puts the install's
``node_modules/.bin`` there). A CLI that is missing, or of another version than the lockfile
pins, skips the test with the command that installs it; with ``PROCESSION_REQUIRE_AGENT_CLIS=1``
(CI) it fails the test instead, so a broken install cannot pass as a green run.

A sandbox (fixtures ``claude_sandbox``, ``codex_sandbox``, ``opencode_sandbox``) is a throwaway
HOME, working folder and TMPDIR for one CLI, with the environment and configuration that point
it at the test's `ModelServer` and keep it off the network (the settings measured in
/work/shared/AGENT-CLIS.md and each CLI's FACTS). `AgentSandbox.env` is the whole environment
to start the CLI with, for tests that start it some other way (through procession's runners).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from support.models import ModelServer
from support.wait import HANG_S

AGENTS = Path(__file__).resolve().parents[1] / "agents"
INSTALL_HINT = 'run tests/agents/install and put the folder it prints on PATH (PATH="$(tests/agents/install):$PATH")'
PACKAGES = {"claude": "@anthropic-ai/claude-code", "codex": "@openai/codex", "opencode": "opencode-ai"}
# Environment variables of the developer's own setup that would point a CLI elsewhere. PWD too:
# opencode takes its working folder from $PWD, not from its process's cwd.
FOREIGN = ("ANTHROPIC_", "CLAUDE_", "OPENAI_", "CODEX_", "OPENCODE_", "XDG_", "PWD", "OLDPWD")


class AgentCliMissing(Exception):
    """No usable CLI of the pinned version; the message says what was found and what to do."""


@dataclass(frozen=True, slots=True)
class AgentCli:
    """A located CLI. ``command`` is what PATH (or the install) names; ``exe`` is what tests
    run: the same file, except for Codex, whose npm command is a Node wrapper that stays the
    native binary's parent (Node 20 has no execve) and forwards only SIGINT, SIGTERM and SIGHUP:
    a SIGKILL or SIGSTOP of the wrapper would miss the CLI, and kill would leave it running."""

    name: str
    version: str
    command: Path
    exe: Path


def install_key() -> str:
    """The cache key of tests/agents/install: the same hash, so both find the same folder."""
    digest = hashlib.sha256((AGENTS / "package.json").read_bytes() + (AGENTS / "package-lock.json").read_bytes())
    return digest.hexdigest()[:16]


def pinned_version(name: str) -> str:
    return str(json.loads((AGENTS / "package.json").read_text())["dependencies"][PACKAGES[name]])


def codex_native(command: Path) -> Path:
    """The platform binary the Codex npm wrapper would start (as its bin/codex.js finds it)."""
    script = command.resolve()
    if script.suffix != ".js":
        return script
    machine = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine().lower())
    triple = {("linux", "x64"): "x86_64-unknown-linux-musl", ("linux", "arm64"): "aarch64-unknown-linux-musl",
              ("darwin", "x64"): "x86_64-apple-darwin", ("darwin", "arm64"): "aarch64-apple-darwin"}
    system = platform.system().lower()
    if machine is None or (system, machine) not in triple:
        return script
    native = (script.parents[3] / "@openai" / f"codex-{system}-{machine}" / "vendor" / triple[system, machine]
              / "bin" / "codex")
    return native if native.exists() else script


def locate(name: str) -> Path:
    """Where ``name`` is: in the install for this lockfile under ``$PROCESSION_AGENT_CLIS``
    when that is set, else on PATH."""
    root = os.environ.get("PROCESSION_AGENT_CLIS")
    if root:
        command = Path(root) / install_key() / "node_modules" / ".bin" / name
        if not command.exists():
            raise AgentCliMissing(f"{name} not found in PROCESSION_AGENT_CLIS={root} (for this lockfile: {command})"
                                  f": {INSTALL_HINT}")
        return command
    found = shutil.which(name)
    if found is None:
        raise AgentCliMissing(f"{name} not found on PATH: {INSTALL_HINT}")
    return Path(found)


@cache
def find_cli(name: str) -> AgentCli:
    """Locate ``name`` and check it is the pinned version (once per test session)."""
    command = locate(name)
    exe = codex_native(command) if name == "codex" else command
    try:
        out = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=HANG_S,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise AgentCliMissing(f"{exe} --version failed ({error}): {INSTALL_HINT}") from error
    match = re.search(r"\d+\.\d+\.\d+", out.stdout)
    version = match.group() if match else f"unknown ({(out.stdout or out.stderr).strip()[:200]})"
    if version != pinned_version(name):
        raise AgentCliMissing(f"{command} is {name} {version}, the tests pin {pinned_version(name)}: {INSTALL_HINT}")
    return AgentCli(name, version, command, exe)


def require_cli(name: str) -> AgentCli:
    """The CLI, or skip the test saying how to install it (fail instead when CI requires them)."""
    try:
        return find_cli(name)
    except AgentCliMissing as missing:
        reason = str(missing)
    if os.environ.get("PROCESSION_REQUIRE_AGENT_CLIS") == "1":
        pytest.fail(f"PROCESSION_REQUIRE_AGENT_CLIS=1 and {reason}", pytrace=False)
    pytest.skip(reason)


@dataclass(frozen=True, slots=True)
class CliRun:
    """A finished CLI process: its JSON event lines parsed, the rest kept as text."""

    argv: list[str]
    returncode: int
    events: list[dict[str, Any]]
    stdout: str
    stderr: str
    seconds: float

    def of(self, type: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("type") == type]


class AgentSandbox:
    """A throwaway HOME, working folder and TMPDIR for one CLI, pointed at ``server``.

    Subclasses say which variables and files point their CLI at the server (`vars`), how it
    is asked for one headless turn (`headless`) and where its events name the session
    (`session_id`).
    """

    name = ""

    def __init__(self, cli: AgentCli, server: ModelServer, root: Path) -> None:
        self.cli, self.server, self.root = cli, server, root
        self.home, self.workdir, self.tmp = root / "home", root / "work", root / "tmp"
        for folder in (self.home, self.workdir, self.tmp):
            folder.mkdir(parents=True, exist_ok=True)

    def vars(self) -> dict[str, str]:
        """The variables this sandbox sets (on top of the test process's cleaned environment)."""
        return {"HOME": str(self.home), "TMPDIR": str(self.tmp)}

    @property
    def env(self) -> dict[str, str]:
        """The whole environment to start the CLI with: the test's own, without any variable
        that would point a CLI at a real account, config or folder, plus `vars`."""
        base = {k: v for k, v in os.environ.items() if not k.startswith(FOREIGN)}
        return base | self.vars()

    def headless(self, prompt: str, resume: str | None = None) -> tuple[list[str], str | None]:
        """Arguments (after the executable) and stdin for one headless turn, resuming a session."""
        raise NotImplementedError

    def session_id(self, run: CliRun) -> str:
        raise NotImplementedError

    def add_mcp_server(self, name: str, command: list[str]) -> None:
        """Give the CLI a stdio MCP server, known as ``name``, whose tools it may call unasked."""
        raise NotImplementedError

    def run(self, args: list[str], input: str | None = None, timeout: float = HANG_S) -> CliRun:
        """Run the CLI to its end in the working folder; stdin is closed (or ``input``).
        ``timeout`` is a hang guard (`HANG_S`): a slow start is waited for, however slow."""
        argv = [str(self.cli.exe), *args]
        started = time.monotonic()
        try:
            done = subprocess.run(argv, cwd=self.workdir, env=self.env, input=input, capture_output=True,
                                  text=True, timeout=timeout, stdin=None if input is not None else subprocess.DEVNULL)
        except subprocess.TimeoutExpired as expired:
            raise AssertionError(f"{self.name} ran over {timeout}s: {argv}\nstderr: {expired.stderr!r}") from None
        events = []
        for line in done.stdout.splitlines():
            try:
                events.append(json.loads(line))
            except ValueError:
                pass
        return CliRun(argv, done.returncode, events, done.stdout, done.stderr, time.monotonic() - started)

    def start(self, args: list[str], input: str | None = None) -> subprocess.Popen[str]:
        """Start the CLI in the working folder and return at once (stdout and stderr piped).

        ``input`` is given through a file, so stdin is at its end before the CLI reads it:
        opencode and Codex wait for the end of a piped stdin before they ask the model."""
        stdin_file = self.tmp / "stdin"
        stdin_file.write_text(input or "")
        with stdin_file.open() as stdin:
            return subprocess.Popen([str(self.cli.exe), *args], cwd=self.workdir, env=self.env, text=True,
                                    stdin=stdin if input is not None else subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def prompt(self, text: str, resume: str | None = None, timeout: float = HANG_S) -> CliRun:
        """One headless turn: the CLI runs its agent loop against the script, then exits."""
        args, stdin = self.headless(text, resume)
        return self.run(args, stdin, timeout)


class ClaudeSandbox(AgentSandbox):
    """Claude Code: ``ANTHROPIC_BASE_URL`` at the server, non-essential traffic (telemetry,
    update checks, error reports) off; its state goes to HOME, its Bash tool's files to TMPDIR.
    Root may not skip permissions, so headless turns allow the tools they use by name."""

    name = "claude"
    TOOLS = "Bash Read"
    wait_for_mcp = False

    def vars(self) -> dict[str, str]:
        # By default it waits about 2.7 s for MCP servers, then starts without their tools.
        mcp = {"MCP_CONNECTION_NONBLOCKING": "0", "MCP_CONNECT_TIMEOUT_MS": "30000"} if self.wait_for_mcp else {}
        return super().vars() | mcp | {
            "ANTHROPIC_BASE_URL": self.server.url, "ANTHROPIC_API_KEY": "sk-scripted",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1"}

    def headless(self, prompt: str, resume: str | None = None) -> tuple[list[str], str | None]:
        args = ["-p", prompt, "--output-format", "stream-json", "--verbose", "--allowedTools", self.TOOLS]
        return args + (["--resume", resume] if resume else []), None

    def session_id(self, run: CliRun) -> str:
        return str(run.of("system")[0]["session_id"])

    def add_mcp_server(self, name: str, command: list[str]) -> None:
        """In the user's own config (``~/.claude.json``, allowed in ``~/.claude/settings.json``),
        so no flag is needed; the CLI waits for it to connect instead of starting without it."""
        user = self.home / ".claude.json"
        config = json.loads(user.read_text()) if user.exists() else {}
        config.setdefault("mcpServers", {})[name] = {"type": "stdio", "command": command[0], "args": command[1:]}
        user.write_text(json.dumps(config))
        settings = self.home / ".claude" / "settings.json"
        settings.parent.mkdir(exist_ok=True)
        allowed = json.loads(settings.read_text()) if settings.exists() else {"permissions": {"allow": []}}
        allowed["permissions"]["allow"].append(f"mcp__{name}")
        settings.write_text(json.dumps(allowed))
        self.wait_for_mcp = True


class CodexSandbox(AgentSandbox):
    """Codex CLI: a ``model_providers.scripted`` entry (``wire_api = "responses"``) in
    ``$CODEX_HOME/config.toml``, the network features off (plugins: a git ls-remote of
    github.com at every start), no retries (a dead server fails at once instead of
    reconnecting forever), and a sandbox mode that lets the shell tool write the working folder
    without asking. `config` is the TOML as a dict: change it, then `write_config`."""

    name = "codex"

    def __init__(self, cli: AgentCli, server: ModelServer, root: Path) -> None:
        super().__init__(cli, server, root)
        self.codex_home = self.home / ".codex"
        self.config: dict[str, Any] = {
            "model_provider": "scripted",
            "approval_policy": "never",
            "sandbox_mode": "workspace-write",
            "check_for_update_on_startup": False,
            "analytics": {"enabled": False},
            "feedback": {"enabled": False},
            "history": {"persistence": "none"},
            "features": {"plugins": False, "remote_plugin": False, "apps": False, "shell_snapshot": False,
                         "daemon_auto_start": False, "unbounded_connection_retries": False},
            "model_providers": {"scripted": {
                "name": "scripted", "base_url": server.url_v1, "wire_api": "responses",
                "env_key": "SCRIPTED_MODEL_KEY", "request_max_retries": 0, "stream_max_retries": 0}},
        }
        self.write_config()

    def write_config(self) -> None:
        self.codex_home.mkdir(parents=True, exist_ok=True)
        (self.codex_home / "config.toml").write_text(tomli_w.dumps(self.config))

    def vars(self) -> dict[str, str]:
        return super().vars() | {"CODEX_HOME": str(self.codex_home), "SCRIPTED_MODEL_KEY": "sk-scripted"}

    def headless(self, prompt: str, resume: str | None = None) -> tuple[list[str], str | None]:
        flags = ["--json", "--skip-git-repo-check"]
        return (["exec", "resume", *flags, resume, prompt] if resume else ["exec", *flags, prompt]), None

    def session_id(self, run: CliRun) -> str:
        return str(run.of("thread.started")[0]["thread_id"])

    def add_mcp_server(self, name: str, command: list[str]) -> None:
        """Required (else runs often start before its tools are listed) and approved (else
        exec refuses the call under approval_policy "never")."""
        self.config.setdefault("mcp_servers", {})[name] = {
            "command": command[0], "args": command[1:], "required": True, "default_tools_approval_mode": "approve"}
        self.write_config()


class OpencodeSandbox(AgentSandbox):
    """opencode: an ``@ai-sdk/openai-compatible`` provider at the server, given whole in
    ``OPENCODE_CONFIG_CONTENT`` (a resumed session would otherwise load the config of its
    stored folder), the model catalogue fetch off, and its background ``npm install`` of its
    plugin package made a no-op by a config folder that already looks installed. The prompt
    goes on stdin: argv words with spaces reach the model wrapped in quotes. `config` is the
    JSON as a dict, read at each start."""

    name = "opencode"
    MODEL = "scripted/scripted-model"

    def __init__(self, cli: AgentCli, server: ModelServer, root: Path) -> None:
        super().__init__(cli, server, root)
        self.config: dict[str, Any] = {
            "provider": {"scripted": {
                "npm": "@ai-sdk/openai-compatible", "name": "Scripted",
                "options": {"baseURL": server.url_v1, "apiKey": "sk-scripted"},
                "models": {"scripted-model": {"name": "scripted-model",
                                              "limit": {"context": 200_000, "output": 8_000}}}}},
            "model": self.MODEL, "small_model": self.MODEL, "autoupdate": False, "share": "disabled",
        }
        self._block_plugin_install()

    def _block_plugin_install(self) -> None:
        """opencode skips its install when node_modules exists and the lockfile names every
        dependency, its own plugin package included."""
        config = self.home / ".config" / "opencode"
        (config / "node_modules").mkdir(parents=True, exist_ok=True)
        deps = {"@opencode-ai/plugin": self.cli.version}
        (config / "package.json").write_text(json.dumps({"dependencies": deps}))
        (config / "package-lock.json").write_text(
            json.dumps({"lockfileVersion": 3, "packages": {"": {"dependencies": deps}}}))

    def vars(self) -> dict[str, str]:
        home = self.home
        return super().vars() | {
            "XDG_DATA_HOME": str(home / ".local" / "share"), "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_CACHE_HOME": str(home / ".cache"), "XDG_STATE_HOME": str(home / ".local" / "state"),
            "OPENCODE_DISABLE_MODELS_FETCH": "1", "OPENCODE_DISABLE_AUTOUPDATE": "1",
            "OPENCODE_CONFIG_CONTENT": json.dumps(self.config)}

    def headless(self, prompt: str, resume: str | None = None) -> tuple[list[str], str | None]:
        # A resumed session runs in its stored folder; without --dir the CLI never exits.
        return ["run", "--format", "json"] + (["-s", resume, "--dir", str(self.workdir)] if resume else []), prompt

    def session_id(self, run: CliRun) -> str:
        return str(run.events[0]["sessionID"])

    def add_mcp_server(self, name: str, command: list[str]) -> None:
        """opencode waits for its MCP servers before its first request."""
        self.config.setdefault("mcp", {})[name] = {"type": "local", "command": command, "enabled": True}


SANDBOXES: dict[str, type[AgentSandbox]] = {s.name: s for s in (ClaudeSandbox, CodexSandbox, OpencodeSandbox)}


def session_env(agents: Sequence[AgentSandbox], setenv: Callable[[str, str], None], *, machine: bool = False,
                extra: Mapping[str, str] | None = None) -> tuple[dict[str, str], list[str]]:
    """The sandboxes' variables (and ``extra``) as a session's environment (the first sandbox's value wins):
    stored settings, and the names of those that read like a secret, passed (``setenv`` puts
    their values in the engine's environment). TMPDIR is left out: each run has its own.
    ``machine``: what a run takes of the engine's environment anyway (HOME, the CLIs' state
    folders) is a machine's own configuration, set in the engine's environment, not stored
    (a snapshot carries the session to another HOME)."""
    from procession.model import environ
    from procession.model.errors import InvalidArgument

    settings = {f"PROCESSION_{a.name.upper()}": str(a.cli.command) for a in agents}
    passed: list[str] = []
    inherited = set(environ.BASE) | {n for a in agents for n in environ.RUNNER[a.name]}
    for key, value in {**{k: v for a in reversed(agents) for k, v in a.vars().items()}, **(extra or {})}.items():
        if key in environ.RESERVED:
            continue
        if machine and key in inherited:
            setenv(key, value)
            continue
        try:
            environ.setting(f"{key}={value}")
        except InvalidArgument:  # reads like a secret: the engine's own value, passed at run time
            setenv(key, value)
            passed.append(key)
            continue
        settings[key] = value
    return settings, passed


@pytest.fixture
def model_server() -> Iterator[ModelServer]:
    """A started `ModelServer` with an empty script; the test adds its turns. Fails the test
    if a turn request found the script empty (the script was shorter than the agent's loop)."""
    with ModelServer() as server:
        yield server
    unserved = server.unserved
    assert not unserved, f"{len(unserved)} turn request(s) found the script empty: {[r.path for r in unserved]}"


def sandbox(name: str, server: ModelServer, root: Path) -> AgentSandbox:
    """A sandbox for CLI ``name`` (skipping or failing the test when the CLI is missing)."""
    return SANDBOXES[name](require_cli(name), server, root / name)


@pytest.fixture
def claude_sandbox(model_server: ModelServer, tmp_path: Path) -> ClaudeSandbox:
    return ClaudeSandbox(require_cli("claude"), model_server, tmp_path / "claude")


@pytest.fixture
def codex_sandbox(model_server: ModelServer, tmp_path: Path) -> CodexSandbox:
    return CodexSandbox(require_cli("codex"), model_server, tmp_path / "codex")


@pytest.fixture
def opencode_sandbox(model_server: ModelServer, tmp_path: Path) -> OpencodeSandbox:
    return OpencodeSandbox(require_cli("opencode"), model_server, tmp_path / "opencode")


@pytest.fixture(params=sorted(SANDBOXES))
def agent_sandbox(request: pytest.FixtureRequest, model_server: ModelServer, tmp_path: Path) -> AgentSandbox:
    """Each CLI in turn (the test runs once per CLI, with that CLI's id)."""
    return sandbox(request.param, model_server, tmp_path)
