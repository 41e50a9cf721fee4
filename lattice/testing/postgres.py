"""A throwaway PostgreSQL server for tests and benchmarks: ``TemporaryPostgres``.

``initdb`` makes a cluster in a new temporary folder, ``pg_ctl`` runs it listening on a Unix
socket in that folder only (no TCP), and leaving the ``with`` block stops it and removes the
folder. PostgreSQL refuses to run as root: as root the server runs as the ``postgres`` user
(else ``nobody``) through ``runuser``, and the folder is handed to that user.

    with TemporaryPostgres() as pg:
        store = PostgresHistoryStore(pg.conninfo, "session-1")

Not imported by ``lattice.testing`` itself (it is only needed where a server is).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from typing import Callable, List, Optional, Sequence
from urllib.parse import quote

__all__ = ["TemporaryPostgres", "find_postgres_bin", "PostgresUnavailable"]


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL server programs on this machine (or no user to run them as)."""


def find_postgres_bin() -> Optional[str]:
    """The folder holding ``initdb``, ``pg_ctl`` and ``postgres``, or None."""
    candidates: List[str] = []
    found = shutil.which("initdb")
    if found:
        candidates.append(os.path.dirname(os.path.realpath(found)))
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    candidates += ["/usr/local/pgsql/bin", "/usr/pgsql/bin"]
    for folder in candidates:
        if all(os.access(os.path.join(folder, p), os.X_OK) for p in ("initdb", "pg_ctl",
                                                                     "postgres")):
            return folder
    return None


class TemporaryPostgres:
    """A private PostgreSQL cluster on a Unix socket, for the length of a ``with`` block.

    Args:
        fsync: keep PostgreSQL's durability settings (``fsync``, ``synchronous_commit``);
            default off, as a test server needs no crash safety.
        dbname: the database created for the caller.

    Attributes (once started): ``conninfo`` (libpq ``key=value``), ``url`` (the same as a
    URI), ``socket_dir``, ``port``, ``dbname``.

    Raises:
        PostgresUnavailable: no server programs, or running as root with no other user.
    """

    def __init__(self, *, fsync: bool = False, dbname: str = "lattice", port: int = 5432) -> None:
        self.fsync = fsync
        self.dbname = dbname
        self.port = port
        self.bin = find_postgres_bin()
        self.root: Optional[str] = None
        self.as_user = _run_as_user()

    @property
    def socket_dir(self) -> str:
        assert self.root is not None, "not started"
        return self.root

    @property
    def conninfo(self) -> str:
        return f"host={self.socket_dir} port={self.port} dbname={self.dbname} user=postgres"

    @property
    def url(self) -> str:
        return (f"postgresql://postgres@/{self.dbname}?host={quote(self.socket_dir, safe='')}"
                f"&port={self.port}")

    def __enter__(self) -> TemporaryPostgres:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- running it -----------------------------------------------------------------

    def start(self) -> None:
        if self.bin is None:
            raise PostgresUnavailable("no PostgreSQL server programs (initdb, pg_ctl, postgres) "
                                      "found on PATH or in /usr/lib/postgresql/*/bin")
        if os.geteuid() == 0 and self.as_user is None:
            raise PostgresUnavailable("running as root and no 'postgres' or 'nobody' user to "
                                      "run the server as")
        self.root = tempfile.mkdtemp(prefix="lattice-pg-")
        if self.as_user is not None:
            import pwd

            entry = pwd.getpwnam(self.as_user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        os.chmod(self.root, 0o700)
        data = os.path.join(self.root, "data")
        try:
            self._tool("initdb", "-D", data, "-A", "trust", "-U", "postgres", "-E", "UTF8",
                       "--locale=C", "--no-sync")
            self._pg_ctl("start")
            self._tool("createdb", "-h", self.root, "-p", str(self.port), "-U", "postgres",
                       self.dbname)
        except BaseException:
            self.stop()
            raise

    def restart(self, *, while_down: Optional[Callable[[], None]] = None) -> None:
        """``pg_ctl restart -m fast``: every connection is ended, the server comes back.
        With ``while_down``: stop, call it (the server is down meanwhile), start again."""
        if while_down is None:
            self._pg_ctl("restart")
            return
        self._pg_ctl("stop")
        try:
            while_down()
        finally:
            self._pg_ctl("start")

    def stop(self) -> None:
        root, self.root = self.root, None
        if root is None:
            return
        try:
            if os.path.exists(os.path.join(root, "data", "postmaster.pid")):
                self.root = root
                try:
                    self._tool("pg_ctl", "-D", os.path.join(root, "data"), "-m", "immediate",
                               "-w", "stop")
                finally:
                    self.root = None
        finally:
            shutil.rmtree(root, ignore_errors=True)

    def _pg_ctl(self, action: str) -> None:
        assert self.root is not None
        options = f"-k {self.root} -c listen_addresses='' -p {self.port}"
        if not self.fsync:
            options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        self._tool("pg_ctl", "-D", os.path.join(self.root, "data"), "-l",
                   os.path.join(self.root, "server.log"), "-o", options, "-m", "fast", "-w",
                   "-t", "60", action)

    def _tool(self, name: str, *args: str) -> None:
        assert self.bin is not None
        program = os.path.join(self.bin, name)
        if not os.path.exists(program):
            program = shutil.which(name) or program
        command: Sequence[str] = [program, *args]
        if self.as_user is not None:
            command = ["runuser", "-u", self.as_user, "--", *command]
        done = subprocess.run(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, cwd="/", timeout=120)
        if done.returncode != 0:
            log = ""
            if self.root and os.path.exists(os.path.join(self.root, "server.log")):
                with open(os.path.join(self.root, "server.log"), errors="replace") as f:
                    log = f.read()[-2000:]
            raise RuntimeError(f"{name} failed ({done.returncode}): "
                               f"{done.stdout.decode(errors='replace')[-2000:]}{log}")


def _run_as_user() -> Optional[str]:
    """As root: the user the server runs as; otherwise None (run as ourselves)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return None
    import pwd

    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        return name
    return None
