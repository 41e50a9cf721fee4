"""A real Redis server for the background-job tests: one private server per test session.

Debian's ``redis-server`` on a free loopback port with no persistence, in a temporary folder,
stopped when the session ends. Tests that use ``redis_server`` are skipped, with the reason,
only when this machine has no ``redis-server`` (``.ci/run`` installs it).
"""

import shutil
import socket
import subprocess
import tempfile
import time

import pytest
import real_parts


class TemporaryRedis:
    """``start()`` runs redis-server on 127.0.0.1:<free port>; ``url`` is its redis:// URL."""

    def __init__(self) -> None:
        self.port = 0
        self.folder = ""
        self.process = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 20.0) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        with socket.socket() as probe:  # a free port; the tiny race with others is retried below
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.folder = tempfile.mkdtemp(prefix="lattice-redis-")
        self.process = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.folder, "--protected-mode", "yes"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.process.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as conn:
                    conn.sendall(b"PING\r\n")
                    if conn.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.05)  # not listening yet: poll until the deadline
        raise RuntimeError("redis-server did not answer PING in time")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        if self.folder:
            shutil.rmtree(self.folder, ignore_errors=True)


@pytest.fixture(scope="session")
def redis_server():
    server = TemporaryRedis()
    try:
        server.start()
    except RuntimeError as exc:
        server.stop()
        real_parts.skip(f"Redis for the background-job tests: {exc}",
                        "apt-get install redis-server")
    try:
        yield server
    finally:
        server.stop()


