"""A shell command line as a rule reads it: the simple commands it runs, and the programs known
to run no other.

Only what a shell reads plainly is divided: words (quoted or not, a backslash escaping one
character) and the operators between simple commands (``;``, ``&&``, ``||``, ``|``, ``|&``,
``&``, a new line); a redirection only of one descriptor to another (``2>&1``) or to
``/dev/null``. Anything else that could change what runs or what is written makes the line
not dividable (``divide`` gives None) and a rule then takes it whole: a substitution (``$(…)``,
a backquote, ``$VAR``, even inside double quotes), a group or a subshell, a redirection to or
from a file, a here-document, a comment, a ``!``, a brace, a line continuation. A glob or a
tilde is divided, but marks its simple command as ``expands``: its words are not those written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

#: Programs known to run no other program (whatever their arguments: no ``-exec``, no
#: ``--compress-program``, no pager or editor, no script) and to change nothing but what they
#: print: a rule may allow one with any arguments. Not here, for running others: shells,
#: interpreters, ``env``, ``sudo``, ``xargs``, ``find``, ``git``, ``make``, ``sed`` (``e``),
#: ``awk`` (``system()``), ``sort`` (``--compress-program``), ``split`` (``--filter``), ``tar``,
#: ``less``, ``diff`` (``-l`` runs ``pr``), ``file`` (``-z`` runs decompressors), ``rg`` (``--pre``),
#: editors, ``time``, ``nice``, ``timeout``…; for writing or setting: ``tee``, ``uniq`` (an
#: output file), ``date`` (``-s``), ``cp``, ``mv``, ``rm``…; ``printf`` (bash's ``-v`` sets any
#: variable, PATH too).
ALONE: Final = frozenset({
    "ls", "cat", "head", "tail", "wc", "grep", "cut", "tr", "nl", "tac", "rev", "od", "base64", "base32", "md5sum",
    "sha1sum", "sha224sum", "sha256sum", "sha384sum", "sha512sum", "b2sum", "cksum", "echo", "pwd", "true", "false",
    "basename", "dirname", "realpath", "readlink", "stat", "du", "df", "whoami", "id", "uname", "seq", "sleep", "cd",
    "cmp", "comm", "join", "paste", "fold", "expand", "unexpand"})


@dataclass(slots=True, frozen=True)
class Simple:
    """One simple command: its words, unquoted; ``expands``: an unquoted glob or tilde in them."""

    words: tuple[str, ...]
    expands: bool = False


#: Characters that end a word outside quotes, or begin an operator.
_BREAK: Final = frozenset(" \t\n;&|<>")
#: Outside quotes: what could run something else or change what runs (a line holding one is not divided).
_REFUSED: Final = frozenset("$`(){}!#")
#: Outside quotes: what globbing or a tilde expands.
_EXPANDS: Final = frozenset("*?[]~^")
#: Where a redirection may send a descriptor.
_NOWHERE: Final = "/dev/null"


def divide(line: str) -> list[Simple] | None:
    """The simple commands ``line`` runs, in order (an empty one left out), or None when it is
    not plainly a list of them (see the module)."""
    out: list[Simple] = []
    words: list[str] = []
    word: list[str] | None = None  # the word being read (None: between words; [] an empty one, '')
    expands = False
    i, n = 0, len(line)

    def add(text: str) -> None:
        nonlocal word
        word = [*(word or []), text]

    def end_word() -> None:
        nonlocal word
        if word is not None:
            words.append("".join(word))
        word = None

    def end_command() -> None:
        nonlocal expands
        end_word()
        if words:
            out.append(Simple(tuple(words), expands))
        words.clear()
        expands = False

    while i < n:
        c = line[i]
        if c in " \t":
            end_word()
        elif c in "\n;":
            end_command()
        elif c in "&|":
            if line.startswith("&>", i):
                return None  # both descriptors redirected: not worth the reading
            end_command()
            i += line[i:i + 2] in ("&&", "||", "|&")
        elif c in "<>":
            if word is not None and "".join(word).isdigit():
                word = None  # the descriptor it redirects
            end_word()
            after = _redirection(line, i)
            if after is None:
                return None
            i = after
            continue
        elif c in _REFUSED:
            return None
        elif c == "\\":
            if i + 1 >= n or line[i + 1] == "\n":
                return None  # a line continuation, or nothing to escape
            i += 1
            add(line[i])
        elif c == "'":
            close = line.find("'", i + 1)
            if close < 0:
                return None
            add(line[i + 1:close])
            i = close
        elif c == '"':
            found = _double_quoted(line, i + 1)
            if found is None:
                return None
            text, i = found
            add(text)
        else:
            expands = expands or c in _EXPANDS
            add(c)
        i += 1
    end_command()
    return out


def _redirection(line: str, i: int) -> int | None:
    """Past a redirection at ``i`` that sends a descriptor to another (``>&2``, ``2>&1``,
    ``<&-``) or to ``/dev/null``; None for any other."""
    op = line[i]
    i += 1
    if line.startswith(op, i) and op == ">":
        i += 1  # >>
    elif line.startswith("|", i) and op == ">":
        i += 1  # >|
    if line.startswith("&", i):
        i += 1
        start = i
        while i < len(line) and (line[i].isdigit() or line[i] == "-"):
            i += 1
        return i if i > start and (i == len(line) or line[i] in _BREAK) else None
    while i < len(line) and line[i] in " \t":
        i += 1
    if line.startswith(_NOWHERE, i) and (i + len(_NOWHERE) == len(line) or line[i + len(_NOWHERE)] in _BREAK):
        return i + len(_NOWHERE)
    return None


def _double_quoted(line: str, i: int) -> tuple[str, int] | None:
    """The text of a double-quoted string from ``i`` and where its closing quote is; None if it
    holds a substitution (``$``, a backquote) or does not close."""
    text: list[str] = []
    while i < len(line):
        c = line[i]
        if c == '"':
            return "".join(text), i
        if c in "$`":
            return None
        if c == "\\" and i + 1 < len(line) and line[i + 1] in '"\\':
            i += 1
            c = line[i]
        elif c == "\\" and i + 1 < len(line) and line[i + 1] == "\n":
            return None
        text.append(c)
        i += 1
    return None
