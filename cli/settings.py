"""The config file as the CLI says it: ``procession config --check`` lists every problem it
has, and each command that reads it (an engine's: ``run``, ``activate --now``) notes the keys
it does not know, once, on standard error."""

from __future__ import annotations

import argparse
import sys

from procession.model import config
from procession.present.keymap import BINDING_IDS
from procession.present.words import printable

from .registry import arg, command
from .terminal import PROG, emit


def note_unknown_keys() -> None:
    """Each key of the config file no reader takes, as a note: a typo in it changes nothing,
    so without a word it would look taken."""
    data, _ = config.read()  # a file that cannot be read: each reader says so itself
    for line in config.unknown_keys(data, BINDING_IDS):
        print(f"{PROG}: note: {printable(line)}", file=sys.stderr)


def problems() -> list[str]:
    """Every problem of the config file: that it cannot be read, or each key no reader takes
    and each value a reader refuses (the monitor's, ``[notify]``, ``[prices]``, ``[otel]``)."""
    from procession.engine import notify, tracing  # the engine only for this command
    from procession.model import prices
    from procession.tui import config as monitor_config  # its settings, without Textual

    where = config.path()
    _, problem = config.read(where)
    if problem:
        return [problem]
    # the monitor's own reading names each key no reader takes (as it says them when it opens)
    return [*monitor_config.load(where).problems, *notify.load(where).problems, *prices.load(where).problems,
            *tracing.load(where, {}).problems]


@command("config", "where the config file is; --check: every problem it has (exit 1 if any)", workspace=False,
         args=[arg("--check", action="store_true", help="list each problem of the config file")])
async def config_(args: argparse.Namespace) -> int:
    found = problems() if args.check else []
    lines = [str(config.path())]
    if args.check:
        lines += [f"  {p}" for p in found] or ["  no problems"]
    emit(args, {"path": str(config.path()), "problems": found}, "\n".join(lines))
    return 1 if found else 0
