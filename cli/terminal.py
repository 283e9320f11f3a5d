"""How the CLI reads and speaks: files and standard input in; data as JSON with ``--json``,
else the present layer's words; notes and refusals on standard error, as ``procession: note:
...`` and ``procession: error: ...``.

Nothing reaches the terminal raw: what is printed goes through ``printable`` here (a
refusal on one line, whatever user text it quotes), and JSON escapes the C1 controls that
``json.dumps`` leaves as they are (``\x9b`` is a CSI to a terminal)."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Sequence
from typing import Any

import orjson

from procession.model.calls import Call
from procession.model import user_files
from procession.model.errors import InvalidArgument, NoneDone, ProcessionError
from procession.model.outcomes import Outcome
from procession.present import results
from procession.present.words import printable

from .registry import PROG as PROG

Progress = Callable[[int, int], None]
#: Characters JSON may hold raw (``ensure_ascii=False``) that a terminal takes as controls.
_C1 = re.compile(r"[\x7f-\x9f]")


class UsageError(Exception):
    """A mistake in the command line found after parsing (exit status 2)."""


def read_text(file: str) -> str:
    """A UTF-8 text file, or standard input for ``-``, of at most ``user_files.TEXT_FILE_MAX``
    bytes: a regular file only (``/dev/zero`` or a FIFO is refused, not read)."""
    try:
        if file == "-":
            data = user_files.read(sys.stdin.buffer, "standard input", user_files.TEXT_FILE_MAX)
        else:
            data = user_files.read_file(file, user_files.TEXT_FILE_MAX)
    except OSError as exc:
        raise InvalidArgument(f"cannot read {file}: {exc.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        what = "standard input" if file == "-" else file
        raise InvalidArgument(f"{what} is not UTF-8 text (invalid byte at {exc.start})") from None


def how(call: Call, sid: int | None) -> str:
    """How to make ``call`` from a shell: the command line."""
    return f"`{PROG} {call}{f' {sid}' if sid is not None else ''}`"


def emit(args: argparse.Namespace, data: Any, text: str | Callable[[], str]) -> None:
    """Print ``data`` as JSON with ``--json``, else the human ``text``."""
    if args.json:
        sys.stdout.write(json_text(data) + "\n")
    else:
        out = text() if callable(text) else text
        if out:
            sys.stdout.write(printable(out) + "\n")


async def emit_stream(args: argparse.Namespace, batches: AsyncGenerator[Sequence[Any], None],
                      to_json: Callable[[Any], Any], line: Callable[[Any], str]) -> None:
    """Print items as they come, a batch at a time: with ``--json`` one JSON array (the same
    text ``emit`` prints for the whole list), else one human line (or more) an item.
    Memory stays flat in how many items there are. Nothing is printed before the first batch
    is read, so that a refusal (no such session) leaves standard output empty."""
    try:
        await _write_stream(args, batches, to_json, line)
    finally:
        await batches.aclose()  # a reader gone (`| head`): the read ends before the workspace closes


async def _write_stream(args: argparse.Namespace, batches: AsyncGenerator[Sequence[Any], None],
                        to_json: Callable[[Any], Any], line: Callable[[Any], str]) -> None:
    out = sys.stdout
    first = await anext(batches, None)
    if args.json:
        out.write("[")
        started = False
        while first is not None:
            if first:
                out.write(("," if started else "") + json_text([to_json(x) for x in first])[1:-1])
                started = True
            first = await anext(batches, None)
        out.write("]\n")
        return
    while first is not None:
        if first:
            out.write(printable("\n".join(line(x) for x in first)) + "\n")
        first = await anext(batches, None)


def json_text(data: Any) -> str:
    """``data`` as JSON that is safe on a terminal and reads back the same: the C1 controls
    (which can only be inside strings) are written as ``\\u00NN`` escapes. ASCII text without
    DEL, the usual case, needs none (two checks in C, far cheaper than the pattern). Written by
    orjson (a tenth of the standard library's time for ``ps --json`` of 100,000 sessions), or by
    the standard library for what orjson cannot hold (an integer past 64 bits)."""
    try:
        text = orjson.dumps(data, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
    except (orjson.JSONEncodeError, TypeError):
        text = json.dumps(data, ensure_ascii=False, default=str)
    return text if text.isascii() and "\x7f" not in text else _C1.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def notes(args: argparse.Namespace, outcomes: Iterable[Outcome]) -> None:
    """The notes calls left, on standard error (with ``--json`` they are in the data)."""
    if args.json:
        return
    for outcome in outcomes:
        for n in outcome.notes:
            print(f"{PROG}: note: {printable(results.note(n, how), lines=False)}", file=sys.stderr)


def done(args: argparse.Namespace, outcome: Outcome, text: str | None = None) -> int:
    """Report one call: its outcome (``text``, else the present layer's sentence), its notes."""
    emit(args, outcome.to_json(), text if text is not None else results.describe(outcome))
    notes(args, [outcome])
    return 0


def refusal(message: str) -> str:
    """A refusal, on one line: the core's messages quote user text (names, keys, paths) as given.
    Every face that reports a refusal in text (the CLI, the MCP server) says this."""
    return printable(message, lines=False)


def error(message: str, *, detail: Sequence[str] = ()) -> None:
    """A refusal or a failure on standard error, in one line; ``detail``: lines beneath it (what
    each part of a failed piece of work said), indented."""
    print(f"{PROG}: error: {refusal(message)}", file=sys.stderr)
    for line in detail:
        print(f"  {refusal(line)}", file=sys.stderr)


def progress_bar(args: argparse.Namespace, label: str) -> tuple[Progress | None, Callable[[], None]]:
    """A rich progress bar on a terminal; nothing with ``--json`` or when not on a terminal."""
    if args.json or not sys.stderr.isatty():
        return None, lambda: None
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   console=Console(stderr=True), transient=True)
    task = bar.add_task(label, total=None)
    bar.start()

    def update(n: int, total: int) -> None:
        bar.update(task, completed=n, total=total or None)

    return update, bar.stop


async def each(args: argparse.Namespace, making: Awaitable[Sequence[Outcome]], *,
               report_json: bool = True, text: Callable[[Outcome], str] = results.describe) -> list[Outcome]:
    """A call on every SID given (``making``: ``Workspace.each``'s, ``sync_all``'s), all or
    none: a refusal for one prints a line for each refused, and changes nothing (exit 1);
    ``text``: each one's line."""
    try:
        made = list(await making)
    except NoneDone as exc:
        for line in exc.refusals:
            error(line)
        raise ProcessionError(exc.NOTHING) from None
    if args.json and report_json:
        emit(args, [o.to_json() for o in made], "")
    elif not args.json:
        print("\n".join(text(o) for o in made))
    notes(args, made)
    return made
