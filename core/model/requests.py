"""What an agent asks a person: the subject a rule of it matches, and how a request reads.

A request is one tool call an agent may not make unasked (its session's ``permissions``,
``model.bounds``). It is answered once: allow (``--always``: a rule for the session, matching
the same tool on the same subject from then on) or deny, with a reason that goes back to the
agent as the tool's refusal. A shell tool's subject is the program it runs (``git`` of ``git
push``): allowing ``git`` always does not allow ``rm``, nor ``git status; rm -rf ~`` (a command
line with shell syntax is its own subject, matched whole). Any other tool's subject is empty,
and its rule matches every call of it.
"""

from __future__ import annotations

import json
import os
import shlex
from typing import Any, Final

#: Tools that run a command line, by the names the agents give them (Claude Code, Codex,
#: opencode, the ``openai:`` loop's ``command`` bindings).
SHELLS: Final = frozenset({"Bash", "bash", "shell", "exec_command", "local_shell", "command"})
#: Answers: given by a person (or a rule, or the policy), or withdrawn when its run ended first.
ALLOW, DENY, WITHDRAWN = "allow", "deny", "withdrawn"
#: The longest reason a deny carries back to the agent.
WHY_MAX: Final = 2000


def subject(tool: str, input: Any) -> str:
    """What a rule made from this call matches besides its tool: a simple shell command's
    program, as written (``git``; ``/usr/bin/make`` is not ``make``), with any arguments; an
    empty command, one that begins with an assignment or with a program that runs another
    (``WRAPPERS``: ``env``, ``sudo``, ``bash``...), and a command line that is more than one simple
    command (``git status; rm -rf ~``, a pipe, a redirection, a substitution) matches only
    itself, whole (``EXACT`` before it): a rule for ``git`` never lets another program ride
    along. Any other tool: '' (any call of it)."""
    if tool not in SHELLS and not tool.endswith("__command"):
        return ""
    command = input.get("command") if isinstance(input, dict) else input
    if isinstance(command, list):
        words = [str(w) for w in command]
        if len(words) >= 3 and os.path.basename(words[0]) in ("bash", "sh", "zsh") and words[1] in ("-c", "-lc"):
            line = words[2]
        elif words and "=" not in words[0] and os.path.basename(words[0]) not in WRAPPERS:
            return words[0]
        else:
            return EXACT + shlex.join(words)
    else:
        line = command if isinstance(command, str) else ""
    simple = _simple(line)
    if not simple or "=" in simple[0] or os.path.basename(simple[0]) in WRAPPERS:
        return EXACT + line  # empty, an assignment first, or a program that runs another: itself only
    return simple[0]


#: Programs whose work is to run another program (a shell, ``env``, ``sudo``, ``xargs``...): a
#: rule for one of them would allow anything, so a command line they begin is its own subject.
WRAPPERS: Final = frozenset({
    "sh", "bash", "dash", "zsh", "ksh", "fish", "env", "sudo", "doas", "su", "xargs", "eval", "exec", "command",
    "builtin", "source", ".", "timeout", "nice", "nohup", "time", "stdbuf", "setsid", "chroot", "unshare", "nsenter",
    "flock", "watch", "parallel", "strace", "ltrace", "script", "expect", "busybox"})
#: Marks a subject that is a whole command line, matched exactly.
EXACT: Final = "="
#: What makes a command line more than one simple command, to a shell.
_SHELL_SYNTAX: Final = frozenset(";|&<>`$(){}\n\r*?[]!~#")


def _simple(line: str) -> list[str] | None:
    """The words of ``line`` when it is one simple command (no shell syntax), else None."""
    if any(c in _SHELL_SYNTAX for c in line):
        return None
    try:
        return shlex.split(line)
    except ValueError:  # unbalanced quotes
        return None


def rule_name(tool: str, subject: str) -> str:
    """A rule as people read it: ``Bash(git)``, ``Bash(exactly: make test > log)``, ``WebFetch``."""
    if subject.startswith(EXACT):
        return f"{tool}(exactly: {subject[len(EXACT):]})"
    return f"{tool}({subject})" if subject else tool


def summary(tool: str, input: Any) -> str:
    """The call in one line: a command's text, a file tool's path, else its input as JSON."""
    if isinstance(input, dict):
        for key in ("command", "cmd", "file_path", "path", "filePath", "url", "pattern"):
            value = input.get(key)
            if isinstance(value, str) and value:
                return value
            if isinstance(value, list) and value:
                return shlex.join(str(v) for v in value)
    return json.dumps(input, ensure_ascii=False, sort_keys=True)
