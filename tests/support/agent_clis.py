"""The real agent CLIs (Claude Code, Codex CLI, opencode, Gemini CLI, Qwen Code, Copilot CLI, and
the ACP adapters claude-agent-acp and codex-acp) for tests, offline.

Each CLI is found where ``tests/agents/install`` put it: in ``$PROCESSION_AGENT_CLIS`` (the
install's cache folder) when that is set, else on PATH (``.ci/run`` puts the install's
``node_modules/.bin`` there). A CLI that is missing, or of another version than the lockfile
pins, skips the test with the command that installs it; with ``PROCESSION_REQUIRE_AGENT_CLIS=1``
(CI) it fails the test instead, so a broken install cannot pass as a green run.

A sandbox (fixtures ``claude_sandbox``, ``codex_sandbox``, ``opencode_sandbox``,
``gemini_sandbox``, ``qwen_sandbox``, ``copilot_sandbox``; any of them, the adapters' too, by
name with `sandbox`) is a throwaway HOME, working folder and TMPDIR for one CLI, with the
environment and configuration that point it at the test's `ModelServer` and keep it off the
network (the settings measured in /work/shared/AGENT-CLIS.md and /work/shared/ACP.md, and each
CLI's FACTS). `AgentSandbox.env` is the whole environment to start the CLI with, for tests that
start it some other way (through procession's runners); `AgentSandbox.acp_argv` is how it
starts as an ACP agent on stdio, where it can be one.
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
PACKAGES = {"claude": "@anthropic-ai/claude-code", "codex": "@openai/codex", "opencode": "opencode-ai",
            "gemini": "@google/gemini-cli", "qwen": "@qwen-code/qwen-code", "copilot": "@github/copilot",
            "codex-acp": "@zed-industries/codex-acp", "claude-agent-acp": "@agentclientprotocol/claude-agent-acp"}
# Environment variables of the developer's own setup that would point a CLI elsewhere. PWD too:
# opencode takes its working folder from $PWD, not from its process's cwd.
FOREIGN = ("ANTHROPIC_", "CLAUDE_", "OPENAI_", "CODEX_", "OPENCODE_", "XDG_", "PWD", "OLDPWD",
           "GEMINI_", "GOOGLE_", "QWEN_", "COPILOT_")
# The adapters have no --version: their version is their package's.
NO_VERSION_FLAG = ("codex-acp", "claude-agent-acp")


class AgentCliMissing(Exception):
    """No usable CLI of the pinned version; the message says what was found and what to do."""


@dataclass(frozen=True, slots=True)
class AgentCli:
    """A located CLI. ``command`` is what PATH (or the install) names; ``exe`` is what tests
    run: the same file, except for Codex, whose npm command is a Node wrapper that stays the
    native binary's parent (Node 20 has no execve) and forwards only SIGINT, SIGTERM and SIGHUP:
    a SIGKILL or SIGSTOP of the wrapper would miss the CLI, and kill would leave it running.
    codex-acp's and Copilot's npm commands are such wrappers too (``spawnSync``, forwarding no
    signal at all), so they are run as their native binaries as well."""

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


def node_platform() -> tuple[str, str] | None:
    """This machine as Node names it (``process.platform``, ``process.arch``), if npm builds for it."""
    machine = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine().lower())
    system = platform.system().lower()
    return (system, machine) if machine and system in ("linux", "darwin") else None


def codex_vendor(node_modules: Path) -> Path | None:
    """The folder of the @openai/codex platform package holding ``bin/codex`` and
    ``codex-resources/`` (its bwrap), for this machine."""
    triple = {("linux", "x64"): "x86_64-unknown-linux-musl", ("linux", "arm64"): "aarch64-unknown-linux-musl",
              ("darwin", "x64"): "x86_64-apple-darwin", ("darwin", "arm64"): "aarch64-apple-darwin"}
    if (found := node_platform()) is None:
        return None
    system, machine = found
    return node_modules / "@openai" / f"codex-{system}-{machine}" / "vendor" / triple[system, machine]


def codex_native(command: Path) -> Path:
    """The platform binary the Codex npm wrapper would start (as its bin/codex.js finds it)."""
    script = command.resolve()
    if script.suffix != ".js" or (vendor := codex_vendor(script.parents[3])) is None:
        return script
    native = vendor / "bin" / "codex"
    return native if native.exists() else script


def codex_acp_native(command: Path) -> Path:
    """The platform binary the codex-acp npm wrapper (``bin/codex-acp.js``, a ``spawnSync``)
    would start: ``node_modules/@zed-industries/codex-acp-<platform>-<arch>/bin/codex-acp``.
    Run it, not the wrapper: the binary does not exit at the end of its stdin, and a wrapper
    killed or closed leaves it running, reparented."""
    script = command.resolve()
    if script.suffix != ".js" or (found := node_platform()) is None:
        return script
    native = script.parents[3] / "@zed-industries" / f"codex-acp-{found[0]}-{found[1]}" / "bin" / "codex-acp"
    return native if native.exists() else script


def copilot_native(command: Path) -> Path:
    """The platform binary the Copilot npm loader (``npm-loader.js``, a ``spawnSync``) would
    start: ``node_modules/@github/copilot-<platform>-<arch>/copilot`` (``linuxmusl`` on musl)."""
    script = command.resolve()
    if script.suffix != ".js" or (found := node_platform()) is None:
        return script
    system, machine = found
    for flavour in ([system, "linuxmusl"] if system == "linux" else [system]):
        native = script.parents[1] / f"copilot-{flavour}-{machine}" / "copilot"
        if native.exists():
            return native
    return script


def codex_bwrap_folder(command: Path) -> Path | None:
    """The folder holding the bubblewrap that @openai/codex vendors (``codex-resources``), for
    codex-acp, which ships none: without a ``bwrap`` on PATH each of its commands panics. Found
    beside codex-acp's own package (``command`` is its npm command or its native binary)."""
    parents = command.resolve().parents
    vendor = codex_vendor(parents[3]) if len(parents) > 3 else None
    return vendor / "codex-resources" if vendor and (vendor / "codex-resources" / "bwrap").exists() else None


def package_version(exe: Path) -> str:
    """The version in the package.json nearest above ``exe`` (the npm package it is part of)."""
    for folder in exe.resolve().parents:
        if (folder / "package.json").exists():
            return str(json.loads((folder / "package.json").read_text()).get("version", "unknown"))
    return "unknown (no package.json)"


NATIVE: dict[str, Callable[[Path], Path]] = {"codex": codex_native, "codex-acp": codex_acp_native,
                                             "copilot": copilot_native}


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
    exe = NATIVE.get(name, Path)(command)
    if name in NO_VERSION_FLAG:
        version = package_version(exe)
    else:
        try:
            out = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=HANG_S,
                                 stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as error:
            raise AgentCliMissing(f"{exe} --version failed ({error}): {INSTALL_HINT}") from error
        match = re.search(r"\d+\.\d+\.\d+", out.stdout)
        version = match.group() if match else f"unknown ({(out.stdout or out.stderr).strip()[:200]})"
    if name == "codex-acp" and codex_bwrap_folder(command) is None:
        raise AgentCliMissing(f"codex-acp needs the bwrap @openai/codex vendors, not found beside {command}: "
                              f"{INSTALL_HINT}")
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
    is asked for one headless turn (`headless`), where its events name the session
    (`session_id`) and, if it can be one, how it starts as an ACP agent (`acp_args`).
    """

    name = ""
    #: The arguments that make the CLI an ACP agent on stdio (None: it cannot be one).
    acp_args: tuple[str, ...] | None = None

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

    @property
    def acp_argv(self) -> list[str]:
        """The command line that starts the CLI as an ACP agent (JSON-RPC lines on stdio)."""
        if self.acp_args is None:
            raise NotImplementedError(f"{self.name} is no ACP agent")
        return [str(self.cli.exe), *self.acp_args]

    def start_acp(self) -> subprocess.Popen[bytes]:
        """Start the CLI as an ACP agent in the working folder, in a process group of its own,
        stdin and stdout piped (binary: JSON-RPC lines), stderr to ``tmp/acp-stderr``. The
        caller ends it: several of these CLIs are two processes (a launcher and the real CLI),
        and codex-acp does not exit at the end of its stdin."""
        with (self.tmp / "acp-stderr").open("ab") as stderr:
            return subprocess.Popen(self.acp_argv, cwd=self.workdir, env=self.env, stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=stderr, start_new_session=True)


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
    acp_args = ("acp",)

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


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2))


class GeminiSandbox(AgentSandbox):
    """Gemini CLI: ``GOOGLE_GEMINI_BASE_URL`` at the server (its Gemini endpoint; plain http is
    allowed for 127.0.0.1), an API key of any value, and ``~/.gemini/settings.json`` choosing
    API-key auth, with usage statistics, telemetry, auto-update and its notice off (0.61's own
    key names: ``general.disableAutoUpdate`` is migrated, and the file rewritten, at start).
    ``GEMINI_CLI_TRUST_WORKSPACE`` trusts the working folder (headless runs in an untrusted one
    exit 55). `settings` is the JSON as a dict: change it, then `write_settings`.

    It relaunches itself (a second Node process with a larger heap) unless
    ``GEMINI_CLI_NO_RELAUNCH`` is set; that is left as a user has it."""

    name = "gemini"
    MODEL = "gemini-2.5-flash"
    acp_args = ("--acp",)

    def __init__(self, cli: AgentCli, server: ModelServer, root: Path) -> None:
        super().__init__(cli, server, root)
        self.settings: dict[str, Any] = {
            "security": {"auth": {"selectedType": "gemini-api-key"}},
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
            "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
            "model": {"name": self.MODEL},
        }
        self.write_settings()

    def write_settings(self) -> None:
        write_json(self.home / ".gemini" / "settings.json", self.settings)

    def vars(self) -> dict[str, str]:
        return super().vars() | {"GEMINI_API_KEY": "sk-scripted", "GOOGLE_GEMINI_BASE_URL": self.server.url,
                                 "GEMINI_CLI_TRUST_WORKSPACE": "true"}

    def headless(self, prompt: str, resume: str | None = None) -> tuple[list[str], str | None]:
        return ["-p", prompt, "--yolo", "--output-format", "stream-json", *(["--resume", resume] if resume else [])], None

    def session_id(self, run: CliRun) -> str:
        return str(run.of("init")[0]["session_id"])


class QwenSandbox(AgentSandbox):
    """Qwen Code: its OpenAI auth at the server (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``,
    ``OPENAI_MODEL``: chat completions), chosen in ``~/.qwen/settings.json`` with usage
    statistics, telemetry and auto-update off. It offers the model Gemini CLI's tool names
    (``run_shell_command``...), which the server's chat format follows; its memory agent is off.
    It relaunches itself (a second Node process) unless ``QWEN_CODE_NO_RELAUNCH`` is set; left
    as a user has it."""

    name = "qwen"
    MODEL = "scripted-model"
    acp_args = ("--acp",)

    def __init__(self, cli: AgentCli, server: ModelServer, root: Path) -> None:
        super().__init__(cli, server, root)
        self.settings: dict[str, Any] = {
            "security": {"auth": {"selectedType": "openai"}},
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
            "general": {"enableAutoUpdate": False},
            # its memory agent asks the model after a turn now and then (a request the script does not hold)
            "memory": {"enableManagedAutoMemory": False, "enableManagedAutoDream": False},
        }
        self.write_settings()

    def write_settings(self) -> None:
        write_json(self.home / ".qwen" / "settings.json", self.settings)

    def vars(self) -> dict[str, str]:
        return super().vars() | {"OPENAI_BASE_URL": self.server.url_v1, "OPENAI_API_KEY": "sk-scripted",
                                 "OPENAI_MODEL": self.MODEL}

    def headless(self, prompt: str, resume: str | None = None) -> tuple[list[str], str | None]:
        # -p is deprecated in favour of a positional prompt
        return ["--yolo", "--output-format", "stream-json", *(["--resume", resume] if resume else []), prompt], None

    def session_id(self, run: CliRun) -> str:
        return str(run.of("system")[0]["session_id"])


class CopilotSandbox(AgentSandbox):
    """Copilot CLI, bring-your-own-key: ``COPILOT_PROVIDER_BASE_URL`` at the server (chat
    completions), ``COPILOT_OFFLINE`` (no GitHub login, telemetry, web tools, GitHub MCP server
    or auto-update), ``COPILOT_AUTO_UPDATE=false``, its state in ``COPILOT_HOME``; GitHub
    tokens of the test's environment are left out. It puts ``<current_datetime>…`` before the
    user's words (`Request.said` reads past it)."""

    name = "copilot"
    MODEL = "scripted-model"
    acp_args = ("--acp",)
    TOKENS = ("GH_TOKEN", "GITHUB_TOKEN", "GH_HOST")

    def vars(self) -> dict[str, str]:
        return super().vars() | {
            "COPILOT_OFFLINE": "true", "COPILOT_PROVIDER_BASE_URL": self.server.url_v1,
            "COPILOT_PROVIDER_API_KEY": "sk-scripted", "COPILOT_MODEL": self.MODEL,
            "COPILOT_HOME": str(self.home / ".copilot"), "COPILOT_AUTO_UPDATE": "false"}

    @property
    def env(self) -> dict[str, str]:
        return {k: v for k, v in super().env.items() if k not in self.TOKENS}

    def headless(self, prompt: str, resume: str | None = None) -> tuple[list[str], str | None]:
        if resume:
            raise NotImplementedError("copilot: resuming a session is not tried yet")
        return ["-p", prompt, "--allow-all-tools", "--output-format", "json"], None

    def session_id(self, run: CliRun) -> str:
        return str(run.of("result")[-1]["sessionId"])


class CodexAcpSandbox(CodexSandbox):
    """codex-acp (Codex as an ACP agent): the Codex sandbox's ``$CODEX_HOME/config.toml``, and
    the bwrap @openai/codex vendors first on PATH (codex-acp ships none: without one every
    command panics). `cli.exe` is the native binary, which never exits at its stdin's end."""

    name = "codex-acp"
    acp_args = ()

    def vars(self) -> dict[str, str]:
        bwrap = codex_bwrap_folder(self.cli.command)
        assert bwrap is not None, "find_cli checks codex-acp has a bwrap beside it"
        return super().vars() | {"PATH": os.pathsep.join([str(bwrap), os.environ.get("PATH", os.defpath)])}


class ClaudeAcpSandbox(ClaudeSandbox):
    """claude-agent-acp (Claude Code as an ACP agent, through the Agent SDK's own Claude Code
    build): the Claude sandbox's variables (the adapter hands its environment on), the model
    named by ``ANTHROPIC_MODEL``, and, as root, ``IS_SANDBOX=1``: the adapter always passes
    ``--allow-dangerously-skip-permissions``, which Claude Code refuses as root without it."""

    name = "claude-agent-acp"
    MODEL = "scripted-model"
    acp_args = ()

    def vars(self) -> dict[str, str]:
        root = {"IS_SANDBOX": "1"} if os.geteuid() == 0 else {}
        return super().vars() | {"ANTHROPIC_MODEL": self.MODEL} | root


#: The CLIs the existing tests run once each (``agent_sandbox``): their headless runners.
SANDBOXES: dict[str, type[AgentSandbox]] = {s.name: s for s in (ClaudeSandbox, CodexSandbox, OpencodeSandbox)}
#: Every sandbox by name, the ACP agents' too.
ALL_SANDBOXES: dict[str, type[AgentSandbox]] = SANDBOXES | {
    s.name: s for s in (GeminiSandbox, QwenSandbox, CopilotSandbox, CodexAcpSandbox, ClaudeAcpSandbox)}
#: The ACP agents, by the sandbox that starts them: ``sandbox(name, ...).start_acp()``.
ACP_AGENTS = ("gemini", "qwen", "copilot", "opencode", "codex-acp", "claude-agent-acp")


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
    inherited = set(environ.BASE) | {n for a in agents for n in environ.RUNNER.get(a.name, ())}
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
    return ALL_SANDBOXES[name](require_cli(name), server, root / name)


@pytest.fixture
def claude_sandbox(model_server: ModelServer, tmp_path: Path) -> ClaudeSandbox:
    return ClaudeSandbox(require_cli("claude"), model_server, tmp_path / "claude")


@pytest.fixture
def codex_sandbox(model_server: ModelServer, tmp_path: Path) -> CodexSandbox:
    return CodexSandbox(require_cli("codex"), model_server, tmp_path / "codex")


@pytest.fixture
def opencode_sandbox(model_server: ModelServer, tmp_path: Path) -> OpencodeSandbox:
    return OpencodeSandbox(require_cli("opencode"), model_server, tmp_path / "opencode")


@pytest.fixture
def gemini_sandbox(model_server: ModelServer, tmp_path: Path) -> GeminiSandbox:
    return GeminiSandbox(require_cli("gemini"), model_server, tmp_path / "gemini")


@pytest.fixture
def qwen_sandbox(model_server: ModelServer, tmp_path: Path) -> QwenSandbox:
    return QwenSandbox(require_cli("qwen"), model_server, tmp_path / "qwen")


@pytest.fixture
def copilot_sandbox(model_server: ModelServer, tmp_path: Path) -> CopilotSandbox:
    return CopilotSandbox(require_cli("copilot"), model_server, tmp_path / "copilot")


@pytest.fixture(params=sorted(SANDBOXES))
def agent_sandbox(request: pytest.FixtureRequest, model_server: ModelServer, tmp_path: Path) -> AgentSandbox:
    """Each CLI in turn (the test runs once per CLI, with that CLI's id)."""
    return sandbox(request.param, model_server, tmp_path)
