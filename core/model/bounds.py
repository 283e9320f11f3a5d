"""What a session may touch, as settings and rules: its confinement, its network, and the
folders no binding opens.

A session's bindings are its capabilities. ``confine`` says how the kernel holds a run to
them: ``bound`` (the default) confines every run where the kernel can and says so where it
cannot; ``strict`` never runs a step the kernel cannot confine as asked (the run fails,
saying why); ``off`` runs it with the user's own reach. ``net`` says where a run may connect
(TCP, by port: the kernel cannot name a host): ``any``, ``none``, or ``model`` (the ports of
the model its runner talks to, and of its bound MCP servers).

Some folders are never a bound: writing to a system folder, or reading or writing the home
folder (or any folder holding it), would hand a step everything the person has. A binding,
a session's folder, an adopted transcript's or a snapshot's folder that is one of them is
refused or held for approval, and a run that would be given one does not start.
"""

from __future__ import annotations

import os
from typing import Final

from .errors import InvalidArgument

STRICT, BOUND, OFF = "strict", "bound", "off"
CONFINES: Final = (STRICT, BOUND, OFF)
ANY, NONE, MODEL = "any", "none", "model"
NETS: Final = (ANY, NONE, MODEL)
#: What a session's agent may do unasked (``permissions``): ``ask`` only read inside its bounds,
#: ``bound`` (the default) whatever its bindings and confinement already allow, ``all`` anything
#: its agent asks for. Anything else waits for a person (``model.requests``).
ASK, ALL = "ask", "all"
PERMISSIONS: Final = (ASK, BOUND, ALL)

#: The system's own folders: read and executed by every run, written by none.
SYSTEM: Final = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/sbin", "/sys",
                 "/usr")
#: Folders of the home folder that hold a person's keys and logins: a folder holding them
#: (the home folder itself) is never a bound, and an adopted session working in one waits
#: for approval.
SECRETS: Final = (".ssh", ".gnupg", ".aws", ".azure", ".kube", ".docker", ".password-store", ".netrc",
                  ".git-credentials", ".pgpass", ".npmrc", ".pypirc", ".config/gcloud", ".config/gh",
                  ".local/share/keyrings")
#: Environment settings that change which program runs or what code it loads (a snapshot's
#: ``PYTHONPATH`` pointing at its own folder runs its own ``sitecustomize.py``): ``approve``
#: flags each one it arms.
LOADERS: Final = frozenset({
    "PATH", "HOME", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "PYTHONSAFEPATH",
    "NODE_OPTIONS", "NODE_PATH", "PERL5LIB", "PERL5OPT", "PERLLIB", "RUBYOPT", "RUBYLIB", "GEM_HOME", "GEM_PATH",
    "BASH_ENV", "ENV", "ZDOTDIR", "SHELL", "GCONV_PATH", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "CLASSPATH",
    "GIT_EXEC_PATH", "GIT_CONFIG", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_SSH", "GIT_SSH_COMMAND",
    "EDITOR", "VISUAL", "PAGER", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "CLAUDE_CONFIG_DIR", "CODEX_HOME",
    "OPENCODE_CONFIG", "OPENCODE_CONFIG_DIR", "OPENCODE_CONFIG_CONTENT", "PROCESSION_CLAUDE", "PROCESSION_CODEX",
    "PROCESSION_OPENCODE", "PROCESSION_AGENT_ARGS",
})
_LOADER_PREFIXES: Final = ("LD_", "DYLD_", "GIT_CONFIG_")


def confine(value: str) -> str:
    return _one_of(value, CONFINES, "--confine")


def net(value: str) -> str:
    return _one_of(value, NETS, "--net")


def permissions(value: str) -> str:
    return _one_of(value, PERMISSIONS, "--permissions")


def _one_of(value: str, values: tuple[str, ...], flag: str) -> str:
    if value not in values:
        raise InvalidArgument(f"{flag} takes {', '.join(values)}, not {value!r}")
    return value


def loads_code(name: str) -> bool:
    """Whether a setting named ``name`` changes what a program runs or loads."""
    return name in LOADERS or name.startswith(_LOADER_PREFIXES)


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def too_wide(path: str, home: str, *, write: bool) -> str | None:
    """Why ``path`` (absolute, resolved) may not be a bound, or None: it is the root, a system
    folder (for writing; reading them every run does anyway) or inside one, or it holds the
    home folder (whose keys and logins a step would reach)."""
    if path == "/":
        return "it is the root of the file system"
    if home and home != "/" and _within(home, path):
        return "it is your home folder" if path == home else f"it holds your home folder {home}"
    if write:
        for folder in SYSTEM:
            if _within(path, folder):
                return f"it is inside the system folder {folder}"
    return None


def secret(path: str, home: str) -> str | None:
    """The secret folder of the home folder ``path`` is in or holds (``~/.ssh``...), or None."""
    if not home or home == "/":
        return None
    for name in SECRETS:
        folder = os.path.join(home, name)
        if _within(path, folder) or _within(folder, path):
            return folder
    return None
