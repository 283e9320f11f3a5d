"""What an agent asks a person: the subject a rule of it matches, and how a request reads.

A request is one tool call an agent may not make unasked (its session's ``permissions``,
``model.bounds``). It is answered once: allow (``--always``: a rule for the session, matching
the same tool on the same subject from then on) or deny, with a reason that goes back to the
agent as the tool's refusal.

A rule never lets one program run another unasked. A shell tool's rule names a program and the
arguments it was allowed with, exactly (``git push origin main``: not ``git push --force``, not
``git -c alias.x='!rm -rf ~' x``); or, for a program known to run no other and change nothing
(``commands.ALONE``: ``ls``, ``cat``, ``grep``…), the program with any arguments. A command line
of several simple commands (``a; b``, ``a && b``, a pipe) is allowed unasked when every one of
them is (``ls | grep x`` with the rules ``ls`` and ``grep``), and a rule made from it takes it
whole, exactly; a line not plainly divided (a substitution, a redirection to a file…: see
``commands``) is matched whole only. Any other tool's subject is empty, and its rule matches
every call of it.

Rules made before this reading named a program with any arguments whatever the program; one
for a program not in ``ALONE`` is read now as exactly the call it was made from (its request),
or, that request gone, as nothing (``reading``).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable
from typing import Any, Final

from .commands import ALONE, Simple, divide

#: Tools that run a command line, by the names the agents give them (Claude Code, Codex,
#: opencode, the ``openai:`` loop's ``command`` bindings).
SHELLS: Final = frozenset({"Bash", "bash", "shell", "exec_command", "local_shell", "command"})
#: Answers: given by a person (or a rule, or the policy), or withdrawn when its run ended first.
ALLOW, DENY, WITHDRAWN = "allow", "deny", "withdrawn"
#: The longest reason a deny carries back to the agent.
WHY_MAX: Final = 2000
#: Marks a subject that is a command exactly (its words, or a whole command line).
EXACT: Final = "="
#: What a rule matches, as ``rules`` says it: every call of a tool, a program with any arguments,
#: a command exactly, or (an old rule no longer read as it was made) nothing.
ANY_CALL, ANY_ARGUMENTS, EXACTLY, NOTHING = "any call", "any arguments", "exactly", "nothing"


def subject(tool: str, input: Any) -> str:
    """What a rule made from this call matches besides its tool (see the module): a shell
    command of a program in ``ALONE``, that program (with any arguments); any other simple
    command, its words exactly (``EXACT`` before them); any other command line, itself whole,
    exactly. Any other tool: '' (any call of it)."""
    if not _shell(tool):
        return ""
    found = _commands(input)
    if isinstance(found, str):
        return EXACT + found
    [one] = found
    if one.words[0] in ALONE:
        return one.words[0]
    return EXACT + shlex.join(one.words)


def cover(tool: str, input: Any, rules: Iterable[str]) -> list[str] | None:
    """The rules (subjects, as ``reading`` gives them) that allow this call: one that matches it
    whole, or (a shell tool) one for each simple command of its line; None when they do not."""
    held = set(rules)
    whole = subject(tool, input)
    if whole in held:
        return [whole]
    line = _command(input) if _shell(tool) else ""
    found = ([Simple(tuple(line))] if line else []) if isinstance(line, list) else divide(line)
    used = [one.words[0] if one.words[0] in ALONE and one.words[0] in held else EXACT + shlex.join(one.words)
            for one in found or ()]
    if not found or any(u not in held or (u.startswith(EXACT) and one.expands) for u, one in zip(used, found)):
        return None
    return list(dict.fromkeys(used))


def reading(tool: str, stored: str, made_from: Any = None) -> str | None:
    """What a stored rule matches now: its subject, as ``cover`` takes it, or None (nothing).
    A program rule for a program not in ``ALONE`` (made before rules read arguments) is read as
    exactly the call it was made from (``made_from``, its request's input), if that call was a
    simple command of that program; else as nothing."""
    if stored == "" or stored.startswith(EXACT) or stored in ALONE:
        return stored
    found = _commands(made_from) if made_from is not None else ""
    return EXACT + shlex.join(found[0].words) if isinstance(found, list) and found[0].words[0] == stored else None


def matches(subject: str | None) -> str:
    """What a subject (``reading``'s) matches, in ``rules``'s words."""
    if subject is None:
        return NOTHING
    if subject == "":
        return ANY_CALL
    return EXACTLY if subject.startswith(EXACT) else ANY_ARGUMENTS


def rule_name(tool: str, subject: str | None) -> str:
    """A rule as people read it: ``Bash(ls: any arguments)``, ``Bash(exactly: git push)``,
    ``WebFetch``; an old rule that matches nothing now, ``Bash(nothing)``."""
    if subject is None:
        return f"{tool}(nothing)"
    if subject.startswith(EXACT):
        return f"{tool}(exactly: {subject[len(EXACT):]})"
    return f"{tool}({subject}: any arguments)" if subject else tool


def _shell(tool: str) -> bool:
    return tool in SHELLS or tool.endswith("__command")


def _command(input: Any) -> str | list[str]:
    """A shell call's command: a line, or the words of one run without a shell (``bash -c
    LINE`` given as words is its line)."""
    command = input.get("command") if isinstance(input, dict) else input
    if isinstance(command, list):
        words = [str(w) for w in command]
        if len(words) == 3 and words[0].rsplit("/", 1)[-1] in ("bash", "sh", "zsh") and words[1] in ("-c", "-lc"):
            return words[2]
        return words
    return command if isinstance(command, str) else ""


def _commands(input: Any) -> list[Simple] | str:
    """The call as one simple command, or (anything else) its whole line, as written."""
    command = _command(input)
    if isinstance(command, list):
        return [Simple(tuple(command))] if command else ""
    found = divide(command)
    if found is None or len(found) != 1 or found[0].expands and found[0].words[0] not in ALONE:
        return command
    return found


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
