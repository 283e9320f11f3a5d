"""A real PostgreSQL server for the tests, started from the system's package.

``initdb`` into a temporary folder, run as an unprivileged user (the server refuses root), on a
port of its own, listening on 127.0.0.1 only, with trust for local connections. Each test gets a
workspace of its own: a fresh schema in the server's one database, named in the address's
``options`` (libpq's ``search_path``), as a user may keep several workspaces in one database.
Durability is traded for speed (``fsync=off``): the server's data dies with the test run.
"""

from __future__ import annotations

import glob
import itertools
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.parse
from pathlib import Path

#: The user the server runs as when the tests run as root
SERVER_USER = "nobody"
DATABASE = "procession"


def binaries() -> Path | None:
    """The folder of ``initdb`` and ``postgres``: on PATH, or Debian's versioned folder."""
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return Path(versions[-1]).parent if versions else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """One server, for one test process (an xdist worker)."""

    def __init__(self, **settings: str) -> None:
        """``settings``: more of the server's own (``ssl="on"``), each given as ``-c NAME=VALUE``."""
        self.settings = settings
        bin_dir = binaries()
        if bin_dir is None:
            raise RuntimeError("PostgreSQL's server is not installed (Debian: apt-get install postgresql)")
        self.root = Path(tempfile.mkdtemp(prefix="procession-pg-"))
        self.user = pwd.getpwuid(os.getuid()).pw_name
        self.prefix: list[str] = []
        if os.getuid() == 0:
            entry = pwd.getpwnam(SERVER_USER)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
            self.prefix = ["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--clear-groups", "--"]
        self.data = self.root / "data"
        subprocess.run([*self.prefix, str(bin_dir / "initdb"), "-D", str(self.data), "-U", "procession",
                        "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync"],
                       check=True, capture_output=True, env={**os.environ, "LC_ALL": "C"})
        self.bin_dir = bin_dir
        self.proc: subprocess.Popen[bytes] | None = None
        for _ in range(5):  # another worker may take the port between its choice and the bind
            self.port = _free_port()
            if self._start():
                break
        else:
            raise RuntimeError(f"PostgreSQL did not start: {(self.root / 'server.log').read_text()[-2000:]}")
        self.admin(f"CREATE DATABASE {DATABASE}", database="postgres")
        self._names = itertools.count(1)

    def _start(self) -> bool:
        self.proc = subprocess.Popen(
            [*self.prefix, str(self.bin_dir / "postgres"), "-D", str(self.data), "-p", str(self.port),
             "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={self.root}",
             "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
             "-c", "max_connections=300", "-c", "shared_buffers=32MB",
             *(word for name, value in self.settings.items() for word in ("-c", f"{name}={value}"))],
            # in the test process's own session: an engine run inside a test ends the orphans of
            # other sessions its process is given (``reaper.reap``), and would end the server
            stdout=subprocess.DEVNULL, stderr=(self.root / "server.log").open("ab"))
        if self._ready():
            return True
        self.proc.kill()
        self.proc.wait()
        return False

    def down(self) -> None:
        """Stop the server at once (what a cut network looks like to its clients)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGINT)  # fast shutdown: clients are cut off
        self.proc.wait(timeout=60)

    def up(self) -> None:
        """Start it again, on the same port, with everything it had."""
        if not self._start():
            raise RuntimeError(f"PostgreSQL did not start again: {(self.root / 'server.log').read_text()[-2000:]}")

    def _ready(self) -> bool:
        import psycopg

        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                return False
            try:
                psycopg.connect(self.url(database="postgres"), connect_timeout=2).close()
                return True
            except psycopg.OperationalError:
                time.sleep(0.05)
        return False

    def url(self, schema: str | None = None, *, database: str = DATABASE) -> str:
        url = f"postgresql://procession@127.0.0.1:{self.port}/{database}"
        if schema:
            url += "?options=" + urllib.parse.quote(f"-csearch_path={schema}")
        return url

    def admin(self, sql: str, *, database: str = DATABASE) -> None:
        import psycopg

        with psycopg.connect(self.url(database=database), autocommit=True) as conn:
            conn.execute(sql)

    def workspace(self) -> str:
        """The address of a new, empty workspace."""
        name = f"ws{os.getpid()}_{next(self._names)}"
        self.admin(f"CREATE SCHEMA {name}")
        return self.url(name)

    def viewer(self, url: str) -> str:
        """The address of the workspace at ``url`` for a new role that may only read it."""
        schema = urllib.parse.unquote(url.split("search_path%3D")[1])
        role = f"viewer_{schema}"
        self.admin(f"CREATE ROLE {role} LOGIN; GRANT USAGE ON SCHEMA {schema} TO {role};"
                   f" GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {role}")
        return url.replace("postgresql://procession@", f"postgresql://{role}@")

    def own(self, name: str, data: bytes, mode: int = 0o600) -> Path:
        """A file of the server's own in its folder (a key it reads must be its user's)."""
        path = self.root / name
        path.write_bytes(data)
        os.chmod(path, mode)
        if os.getuid() == 0:
            entry = pwd.getpwnam(SERVER_USER)
            os.chown(path, entry.pw_uid, entry.pw_gid)
        return path

    def stop(self) -> None:
        """Stop the server and remove its files: a fast shutdown (``SIGINT``), which cuts off
        whatever is still connected (``SIGTERM`` waited for every client to leave: 10 s at the
        end of a run that left one)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.root, ignore_errors=True)
