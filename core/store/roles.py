"""The people of a shared (PostgreSQL) workspace: a database role each, and what it may do in
the workspace's schema. ``role`` and ``schema`` are plain identifiers the caller has checked:
DDL takes no parameters, so they are written into the statements."""

from __future__ import annotations

from .base import Row, Tx


async def role_exists(tx: Tx, role: str) -> bool:
    """Whether the server has a role of this name (of this workspace's or not)."""
    return bool(await tx.value("SELECT 1 FROM pg_roles WHERE rolname = ?", (role,)))


async def workspace_schema(tx: Tx) -> str:
    """The schema the workspace's tables are in."""
    return str(await tx.value("SELECT current_schema()"))


async def add_role(tx: Tx, role: str, schema: str, read_only: bool) -> None:
    """A new login role that may read the workspace (``read_only``), or use it whole: every
    table to read and write, but the journal to read and append to only, never to change."""
    await tx.execute(f"CREATE ROLE {role} LOGIN")
    await tx.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
    if read_only:
        await tx.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {role}")
        await tx.execute(f"ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} GRANT SELECT ON TABLES TO {role}")
    else:
        await tx.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role}")
        await tx.execute(f"REVOKE UPDATE, DELETE ON {schema}.journal FROM {role}")
        await tx.execute(f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {schema} TO {role}")
        await tx.execute(f"ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} GRANT SELECT, INSERT, UPDATE, DELETE ON"
                         f" TABLES TO {role}")
        await tx.execute(f"ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} GRANT USAGE, SELECT ON SEQUENCES TO {role}")


async def revoke_role(tx: Tx, role: str, schema: str) -> None:
    """Take every privilege of ``role`` on the workspace away (the role itself stays)."""
    await tx.execute(f"ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} REVOKE ALL ON TABLES FROM {role}")
    await tx.execute(f"ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} REVOKE ALL ON SEQUENCES FROM {role}")
    await tx.execute(f"REVOKE ALL ON ALL TABLES IN SCHEMA {schema} FROM {role}")
    await tx.execute(f"REVOKE ALL ON ALL SEQUENCES IN SCHEMA {schema} FROM {role}")
    await tx.execute(f"REVOKE ALL ON SCHEMA {schema} FROM {role}")


async def team(tx: Tx) -> list[Row]:
    """The login roles that may use the workspace (``name``, ``read_only``), other than its owner's."""
    return await tx.all(
        "SELECT r.rolname AS name, NOT has_table_privilege(r.rolname, 'sessions', 'INSERT') AS read_only"
        " FROM pg_roles r WHERE r.rolcanlogin AND has_schema_privilege(r.rolname, current_schema(), 'USAGE')"
        " AND r.rolname <> (SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = current_schema())"
        " ORDER BY r.rolname")
