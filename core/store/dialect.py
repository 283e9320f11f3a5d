"""SQLite's statements said in PostgreSQL, and the PostgreSQL schema made from SQLite's.

The store's functions write a statement once, in SQLite's dialect, where the two databases
say it alike; a PostgreSQL workspace runs each through
``translate`` (once per text: the result is cached). The rules are few and exact, each one a
difference the calls' statements meet:

- parameters: ``?`` and ``:name`` become psycopg's ``%s`` and ``%(name)s`` (a literal ``%`` is doubled);
- ``window``, a column name PostgreSQL reserves, is quoted;
- ``CAST(x AS INTEGER)`` / ``AS REAL`` are SQLite's 64-bit integer and double (``BIGINT``,
  ``DOUBLE PRECISION``: PostgreSQL's ``INTEGER`` is 32-bit);
- the scalar ``max(a, b)`` / ``min(a, b)`` are ``GREATEST`` / ``LEAST``;
- ``json_extract(col, '$.key')`` is ``(col::jsonb ->> 'key')``, the value as text (a
  comparison with a number is said for each database: ``base.said``), and
  ``json_each(col, '$.key') w`` is the set of that array's elements ``w.value``;
- ``LIMIT -1`` and a negative bound ``LIMIT ?`` mean no limit, as in SQLite;
- ``CROSS JOIN ... ON`` is an inner ``JOIN``; SQLite's planner hints (``INDEXED BY``) go;
- ``IN ()`` and ``NOT IN ()``, an empty list (SQLite's: nothing is in it), compare with an
  empty array of the same type (``= ANY ('{}')``, ``<> ALL ('{}')``);

Where the two databases say a thing each its own way (PostgreSQL's JSON operators, an order
SQLite's loop gives by itself, the server's own name for the person), the store function
holds both texts side by side (``base.said``): no hint inside a statement is rewritten here.

The schema is not written twice either: ``schema_ddl`` builds SQLite's current schema in
memory from its migrations and says each table, column, key and index in PostgreSQL's terms,
so the two cannot drift apart.
"""

from __future__ import annotations

import functools
import re
import sqlite3
from typing import Any, Final

from . import schema

_SEGMENTS = re.compile(r"('(?:[^']|'')*')|(\"(?:[^\"]|\"\")*\")|(/\*.*?\*/)", re.S)
_JSON_EXTRACT = re.compile(r"json_extract\(([\w.]+), '\$\.(\w+)'\)")
_JSON_EACH = re.compile(r"json_each\(([\w.]+), '\$\.(\w+)'\) (\w+)")
_PARAM = re.compile(r"(?<![:\w])(\?|:([A-Za-z_]\w*))")
_WINDOW = re.compile(r"(?<![\w.\"])window\b")
_INDEXED = re.compile(r"\s+INDEXED BY \w+")
_CAST = re.compile(r"\bAS (INTEGER|REAL)\b")
_SCALAR = re.compile(r"\b(max|min)\(", re.I)
_LIMIT = re.compile(r"\bLIMIT (-1\b|%s)")


@functools.lru_cache(maxsize=4096)
def translate(sql: str) -> str:
    """``sql``, written for SQLite, as PostgreSQL (through psycopg) takes it."""
    sql = _JSON_EXTRACT.sub(r"(\1::jsonb ->> '\2')", sql)
    sql = _JSON_EACH.sub(r"jsonb_array_elements(COALESCE(\1::jsonb -> '\2', '[]'::jsonb)) AS \3(value)", sql)
    out: list[str] = []
    at = 0
    for m in _SEGMENTS.finditer(sql):
        out.append(_code(sql[at:m.start()]))
        if m.group(3) is None:  # a literal or a quoted name: its % doubled, nothing else (a comment goes)
            out.append(m.group(0).replace("%", "%%"))
        at = m.end()
    out.append(_code(sql[at:]))
    return _scalars("".join(out))


def _code(text: str) -> str:
    text = text.replace("%", "%%")
    text = _PARAM.sub(lambda m: "%s" if m.group(1) == "?" else f"%({m.group(2)})s", text)
    text = _WINDOW.sub('"window"', text)
    text = _INDEXED.sub("", text)
    text = _CAST.sub(lambda m: "AS BIGINT" if m.group(1) == "INTEGER" else "AS DOUBLE PRECISION", text)
    text = text.replace("CROSS JOIN", "JOIN").replace(" == ", " = ")
    text = text.replace("NOT IN ()", "<> ALL ('{}')").replace("IN ()", "= ANY ('{}')")
    return _LIMIT.sub(lambda m: "LIMIT ALL" if m.group(1) == "-1" else "LIMIT NULLIF(GREATEST(%s, -1), -1)", text)


def _scalars(sql: str) -> str:
    """``max(a, b)`` (two or more arguments: SQLite's scalar) as ``GREATEST(a, b)``."""
    out, at = [], 0
    for m in _SCALAR.finditer(sql):
        depth, i, commas = 1, m.end(), 0
        while i < len(sql) and depth:
            c = sql[i]
            if c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
            elif c == "," and depth == 1:
                commas += 1
            elif c == "'":
                i = sql.index("'", i + 1)
            i += 1
        if commas:
            out.append(sql[at:m.start()] + ("GREATEST(" if m.group(1).lower() == "max" else "LEAST("))
            at = m.end()
    out.append(sql[at:])
    return "".join(out)


_TYPES = {"INTEGER": "BIGINT", "REAL": "DOUBLE PRECISION", "TEXT": 'TEXT COLLATE "C"', "BLOB": "BYTEA", "": "TEXT"}


def sqlite_schema(version: int = schema.VERSION) -> sqlite3.Connection:
    """SQLite's schema at ``version`` (the current one by default), made in memory by its migrations."""
    db = sqlite3.connect(":memory:")
    for script in schema.MIGRATIONS[:version]:
        db.executescript(script)
    return db


class Unupgradable(Exception):
    """A migration since that version changes a table PostgreSQL has (not only adds to it)."""


def schema_ddl(since: int = 0) -> list[str]:
    """The statements that make the current schema in an empty PostgreSQL database, or (``since``
    a version) that bring one made at that version up to now: the tables, columns and indexes
    added since (``Unupgradable`` when a migration since then changed what was there).

    Text compares bytewise (``COLLATE "C"``), as in SQLite, whatever the database's locale; a
    table's ``id`` is an identity column that takes given values too (a copied workspace keeps
    its ids); references are checked at each statement unless a call defers them
    (``Tx.defer_references``), as SQLite's ``defer_foreign_keys`` does."""
    db, was = sqlite_schema(), sqlite_schema(since)
    out: list[str] = []
    references: list[str] = []
    for table in tables(db):
        cols = db.execute(f"PRAGMA table_info({table})").fetchall()
        before = was.execute(f"PRAGMA table_info({table})").fetchall()
        refs = {r[3]: (r[2], r[4]) for r in db.execute(f"PRAGMA foreign_key_list({table})")}
        if before:
            if cols[:len(before)] != before:
                raise Unupgradable(table)
            for col in cols[len(before):]:
                out.append(f"ALTER TABLE {table} ADD COLUMN {_column(col, [])}")
                if col[1] in refs:
                    references.append(_reference(table, col[1], refs[col[1]]))
            continue
        keys = [c[1] for c in sorted(cols, key=lambda c: c[5]) if c[5]]
        lines = [_column(col, keys) for col in cols]
        lines.append(f"PRIMARY KEY ({', '.join(_quote(k) for k in keys)})")
        for index in db.execute(f"PRAGMA index_list({table})").fetchall():
            if index[3] == "u":  # a UNIQUE constraint of the table's own
                names = [r[2] for r in db.execute(f"PRAGMA index_info({index[1]})")]
                lines.append(f"UNIQUE ({', '.join(_quote(n) for n in names)})")
        out.append(f"CREATE TABLE {table} (\n    " + ",\n    ".join(lines) + "\n)")
        # once every table is there (SQLite's order has a table before those it refers to)
        references += [_reference(table, col, to) for col, to in refs.items()]
    out += references
    indexes = "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL ORDER BY rowid"
    had = dict(was.execute(indexes).fetchall())
    for name, sql in db.execute(indexes):
        if name in had and had[name] != sql:
            raise Unupgradable(name)
        if name not in had:
            out.append(translate(sql).replace("%%", "%"))
    for version in range(since + 1, schema.VERSION + 1):
        out += OWN.get(version, [])
    return out


def tables(db: sqlite3.Connection) -> list[str]:
    """The schema's tables, in the order they were made: not SQLite's own, nor a full-text
    index (a virtual table) and the tables it keeps itself in, which each store makes its own
    way (PostgreSQL's: ``OWN``) and a copy does not carry (it is made again from the rows)."""
    virtual = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'"
                                        " AND sql LIKE 'CREATE VIRTUAL TABLE%'")]
    return [name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'"
                                           " AND name NOT LIKE 'sqlite%' ORDER BY rowid")
            if not any(name == v or name.startswith(f"{v}_") for v in virtual)]


#: A text as PostgreSQL's search index reads it, in words as SQLite's ``unicode61`` makes them:
#: punctuation parts words, so that ``engine.py``, a path or an address is found by its parts
#: (PostgreSQL's parser keeps each whole). ``{text}``: the text; the index's words and a query's
#: are both made of it, in the ``simple`` configuration: lower-cased, no language's stemming or
#: stop words.
SEARCH_TEXT: Final = "regexp_replace({text}, '[[:punct:]]+', ' ', 'g')"
#: How much of a message PostgreSQL indexes: a ``tsvector`` holds at most 1 MB of words, and a
#: message whose words were more (a log, a list of hashes) could not have been stored at all.
SEARCHED_CHARS: Final = 200_000
#: What PostgreSQL makes its own way where SQLite's migration (the version) made a thing of
#: its own: the search index over what was said, a GIN index of each message's terms kept in a
#: column the server computes as rows are added (``said``), so that ranking the matches reads
#: their terms instead of parsing each text again.
OWN: Final[dict[int, list[str]]] = {
    schema.SEARCHED: ["ALTER TABLE messages ADD COLUMN said tsvector GENERATED ALWAYS AS ("
                      + "to_tsvector('simple', " + SEARCH_TEXT.format(text=f"left(content, {SEARCHED_CHARS})")
                      + ")) STORED",
                      "CREATE INDEX messages_search ON messages USING GIN (said)"],
}


def _column(col: tuple[Any, ...], keys: list[str]) -> str:
    _, name, kind, notnull, default, _pk = col
    line = f"{_quote(name)} {_TYPES[kind.upper()]}"
    if name == "id" and keys == ["id"]:
        line += " GENERATED BY DEFAULT AS IDENTITY"
    if notnull:
        line += " NOT NULL"
    if default is not None:
        line += f" DEFAULT {default}"
    return line


def _reference(table: str, col: str, to: tuple[str, str]) -> str:
    return f"ALTER TABLE {table} ADD FOREIGN KEY ({col}) REFERENCES {to[0]}({to[1]}) DEFERRABLE INITIALLY IMMEDIATE"


def _quote(name: str) -> str:
    return f'"{name}"' if name == "window" else name
