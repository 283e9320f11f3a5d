"""The agent CLIs a session can be run by, one descriptor each: their names, where they come
from, how one is found on this machine, what of the engine's environment a run of it takes,
where it keeps its state, where its model is, and how it speaks the Agent Client Protocol.

``claude:``, ``codex:`` and ``opencode:`` are driven by runners written for each (their own
headless modes); ``acp:NAME`` drives any of them that speaks ACP (``acp``) through the one ACP
runner, and ``acp:command:PROG ARGS`` any other program that does. Every module that needs a
fact of an agent reads it here: adding one is a descriptor (and its tests).

Finding the executable is here, below the calls, so that ``spawn`` and ``migrate`` can
refuse a runner whose CLI is not installed with the same sentence the engine says when a
run cannot start. How each CLI is driven lives in ``procession.engine.runners.agents``.
"""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

from .errors import InvalidArgument

@dataclass(slots=True, frozen=True)
class AgentCli:
    kind: str  # its name (the headless runner's kind, ``acp:NAME``'s name), and the executable's
    title: str
    package: str  # on npm
    model_hint: str  # what the model part of the spec is
    #: the context window of its default model, and of one named (None: its runs say, as they go)
    windows: tuple[int | None, int | None] = (None, None)
    #: what a run takes of the engine's environment besides the base (``environ``): its state, its settings
    inherits: tuple[str, ...] = ()
    #: the variables that place its state folder, each the subfolder of the session's own it names
    #: ("": the folder itself; ``agent_homes``)
    homes: Mapping[str, str] = field(default_factory=dict)
    #: the settings in its state folder it runs programs from (``agent_homes.changed`` shows them)
    settings: tuple[str, ...] = ()
    #: a generic CLI's seed: the variable naming the user's own state folder, that folder under the
    #: home folder when it is unset, and what of it a session's folder starts with (Claude Code's,
    #: Codex's and opencode's seeds are their own: ``agent_homes``)
    seed_from: tuple[str, str] = ("", "")
    seeds: tuple[str, ...] = ()
    #: where its model is: variables naming the base URL, then the default (``--net model``)
    endpoint: tuple[tuple[str, ...], str] = ((), "https://")
    headless: bool = True  # driven by a runner of its own (``KIND:``)
    #: how it speaks ACP: its program and arguments (empty: it does not), and the npm package of
    #: that program when it is an adapter of its own
    acp: tuple[str, ...] = ()
    acp_package: str = ""
    acp_fork: bool = False  # whether it offers session/fork over ACP (as verified)
    #: whether it takes a session up again in a new process (session/resume or load; Gemini CLI
    #: 0.61's load finds no session made over ACP: each run is a new session given the conversation)
    acp_load: bool = True
    #: whether the usage its prompts answer with is the process's running total (Copilot CLI's), not the turn's
    acp_usage_total: bool = False
    #: the arguments that open its interactive face on a session (``attach``): ``{id}``, ``{cwd}`` filled in
    attach: tuple[str, ...] = ("--resume", "{id}")

    def runner(self, model: str = "") -> str:
        """The runner a session of this CLI runs with: its own headless one, else over ACP."""
        if self.headless:
            return f"{self.kind}:{model}"
        return f"acp:{self.kind}" + (f":{model}" if model else "")

    def window(self, model: str) -> int | None:
        """The window a session of this CLI has before a run reports one."""
        return self.windows[1 if model else 0]

    @property
    def override(self) -> str:
        """The environment variable that names the executable (else it is looked up on PATH)."""
        return f"PROCESSION_{self.kind.upper()}"

    def install(self) -> str:
        return f"npm install -g {self.package}"


#: How a program on this machine reaches the network: proxies, and certificates it trusts.
NETWORK: Final = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY", "https_proxy", "http_proxy", "all_proxy",
                   "no_proxy", "SSL_CERT_FILE", "SSL_CERT_DIR", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE")
_HOME: Final = {"HOME": ""}  # a CLI that keeps its state under the home folder: the session's folder is its home

CLIS: Final = {
    "claude": AgentCli("claude", "Claude Code", "@anthropic-ai/claude-code", "a Claude model (opus, sonnet, ...)",
                       (1_000_000, 200_000), inherits=("CLAUDE_CONFIG_DIR", *NETWORK), homes={"CLAUDE_CONFIG_DIR": ""},
                       settings=("settings.json", "settings.local.json", "CLAUDE.md", "agents", "commands", "skills"),
                       acp=("claude-agent-acp",), acp_package="@agentclientprotocol/claude-agent-acp", acp_fork=True),
    "codex": AgentCli("codex", "Codex CLI", "@openai/codex", "a model of its provider",
                      inherits=("CODEX_HOME", *NETWORK), homes={"CODEX_HOME": ""}, attach=("resume", "{id}"),
                      settings=("config.toml", "AGENTS.md", "prompts", "rules"),
                      acp=("codex-acp",), acp_package="@zed-industries/codex-acp"),
    "opencode": AgentCli("opencode", "opencode", "opencode-ai", "PROVIDER/MODEL",
                         inherits=("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME",
                                   "OPENCODE_CONFIG", "OPENCODE_CONFIG_DIR", *NETWORK),
                         homes={"XDG_DATA_HOME": "data", "XDG_CONFIG_HOME": "config", "XDG_CACHE_HOME": "cache",
                                "XDG_STATE_HOME": "state"},
                         settings=tuple(f"config/opencode/{name}" for name in (
                             "opencode.json", "opencode.jsonc", "config.json", "AGENTS.md", "agent", "agents", "command",
                             "commands", "plugin", "plugins")),
                         acp=("opencode", "acp"), acp_fork=True, attach=("{cwd}", "--session", "{id}")),
    "gemini": AgentCli("gemini", "Gemini CLI", "@google/gemini-cli", "a Gemini model", headless=False,
                       inherits=NETWORK, homes=_HOME, seed_from=("", ".gemini"),
                       seeds=("settings.json", "oauth_creds.json", "google_accounts.json", "GEMINI.md", "commands"),
                       settings=(".gemini/settings.json", ".gemini/GEMINI.md", ".gemini/commands", ".gemini/extensions"),
                       endpoint=(("GOOGLE_GEMINI_BASE_URL",), "https://generativelanguage.googleapis.com"),
                       acp=("gemini", "--acp"), acp_load=False),
    "qwen": AgentCli("qwen", "Qwen Code", "@qwen-code/qwen-code", "a model of its provider", headless=False,
                     inherits=NETWORK, homes=_HOME, seed_from=("", ".qwen"),
                     seeds=("settings.json", "oauth_creds.json", "QWEN.md", "commands"),
                     settings=(".qwen/settings.json", ".qwen/QWEN.md", ".qwen/commands", ".qwen/extensions"),
                     endpoint=(("OPENAI_BASE_URL",), "https://dashscope.aliyuncs.com"),
                     acp=("qwen", "--acp")),
    "copilot": AgentCli("copilot", "GitHub Copilot CLI", "@github/copilot", "a model of its provider", headless=False,
                        # its native binary unpacks itself (235 MB) into its cache folder at start: the session's own
                        inherits=("COPILOT_HOME", "XDG_CACHE_HOME", *NETWORK), homes={"COPILOT_HOME": "", "XDG_CACHE_HOME": "cache"},
                        seed_from=("COPILOT_HOME", ".copilot"), seeds=("config.json", "mcp-config.json"),
                        settings=("config.json", "mcp-config.json", "agents"),
                        endpoint=(("COPILOT_PROVIDER_BASE_URL",), "https://api.githubcopilot.com"),
                        acp=("copilot", "--acp"), acp_usage_total=True),
}
#: The agent CLIs that speak ACP (``acp:NAME``).
ACP: Final = tuple(kind for kind, cli in CLIS.items() if cli.acp)
#: The agent CLIs with a headless runner of their own (``KIND:``).
HEADLESS: Final = tuple(kind for kind, cli in CLIS.items() if cli.headless)


@dataclass(slots=True, frozen=True)
class Installed:
    """An agent CLI as this machine has it (``installed``)."""

    kind: str
    title: str
    runners: tuple[str, ...]  # how a session is run by it: ``KIND:``, ``acp:KIND``
    program: str | None  # its executable, None if it is not installed
    adapter: str | None  # its ACP adapter's, for one that speaks ACP through another program
    missing: tuple[str, ...]  # the npm packages of what is not here

    @property
    def install(self) -> str:
        """The command that installs what is missing ("" when nothing is)."""
        return f"npm install -g {' '.join(self.missing)}" if self.missing else ""

    def to_json(self) -> dict[str, object]:
        return {"kind": self.kind, "title": self.title, "runners": list(self.runners), "program": self.program,
                "adapter": self.adapter, "install": self.install or None}


def installed(environ: Mapping[str, str] | None = None) -> list[Installed]:
    """Every agent CLI Procession can run, found or not (``procession agents``)."""
    out = []
    for kind, cli in CLIS.items():
        runners = ((f"{kind}:",) if cli.headless else ()) + ((f"acp:{kind}",) if cli.acp else ())
        program = _found(lambda: locate(kind, environ))
        adapter = _found(lambda: locate_acp(kind, environ)) if cli.acp_package else None
        missing = ((cli.package,) if program is None else ()) + (
            (cli.acp_package,) if cli.acp_package and adapter is None else ())
        out.append(Installed(kind, cli.title, runners, program, adapter, missing))
    return out


def _found(find: Callable[[], str]) -> str | None:
    try:
        return find()
    except InvalidArgument:
        return None


def title(cli: str) -> str:
    """What a CLI is called (``acp``: a program named by its command line, speaking ACP)."""
    return CLIS[cli].title if cli in CLIS else "the ACP agent"


def locate(kind: str, environ: Mapping[str, str] | None = None) -> str:
    """The executable of agent CLI ``kind``: ``$PROCESSION_<KIND>`` if set, else ``kind`` on
    PATH; refused in one line, saying how to install it, when there is none."""
    cli = CLIS[kind]
    env = os.environ if environ is None else environ
    named = env.get(cli.override)
    if named:
        if os.path.isfile(named) and os.access(named, os.X_OK):
            return named
        raise InvalidArgument(f"${cli.override} names {named!r}, which is not an executable file")
    found = shutil.which(kind, path=env.get("PATH"))
    if found is None:
        raise InvalidArgument(f"{cli.title} ({kind}) is not installed here: install it with `{cli.install()}`,"
                              f" or name its executable in ${cli.override}")
    return found


def locate_acp(kind: str, environ: Mapping[str, str] | None = None) -> str:
    """The program agent CLI ``kind`` speaks ACP through (its own executable, or its adapter):
    ``$PROCESSION_<KIND>_ACP`` if set, else on PATH; refused in one line, saying how to install
    it, when there is none."""
    cli = CLIS[kind]
    if not cli.acp_package:
        return locate(kind, environ)
    env = os.environ if environ is None else environ
    variable = f"{cli.override}_ACP"
    named = env.get(variable)
    if named:
        if os.path.isfile(named) and os.access(named, os.X_OK):
            return named
        raise InvalidArgument(f"${variable} names {named!r}, which is not an executable file")
    found = shutil.which(cli.acp[0], path=env.get("PATH"))
    if found is None:
        raise InvalidArgument(f"{cli.title}'s ACP adapter ({cli.acp[0]}) is not installed here: install it with"
                              f" `npm install -g {cli.acp_package}`, or name its executable in ${variable}")
    return found


def acp_program(cli: str, command: str = "", environ: Mapping[str, str] | None = None) -> list[str]:
    """The command line an ACP run starts: agent CLI ``cli``'s (``locate_acp``), or (``cli``
    ``acp``) the ``command`` a person gave, its program found on PATH or by its path; refused
    in one line when it is not there."""
    if cli in CLIS:
        return [locate_acp(cli, environ), *CLIS[cli].acp[1:]]
    try:
        words = shlex.split(command)
    except ValueError as exc:
        raise InvalidArgument(f"acp:command:{command}: {exc}") from None
    env = os.environ if environ is None else environ
    found = (words[0] if os.path.isfile(words[0]) and os.access(words[0], os.X_OK) else None) if "/" in words[0] \
        else shutil.which(words[0], path=env.get("PATH"))
    if found is None:
        raise InvalidArgument(f"acp:command: {words[0]!r} is not an executable file here")
    return [os.path.abspath(found), *words[1:]]
