"""``MCPServerStdio``: an MCP server as a subprocess, one JSON-RPC message per line.

Three daemon threads per server: a writer (so a caller never blocks on a full pipe to a
server that stopped reading), one reader of stdout (hands each message to the session),
and one that drains stderr, keeping its tail for error messages. The process runs in its
own process group (POSIX), so closing it also ends what it started (``npx`` → ``node``)
and a Ctrl-C in the terminal reaches lattice, which then closes it, not the server.

``_lock`` guards ``_closing`` and ``_tail``; the queue carries bytes to the writer (None:
close stdin). The transport holds no reference to the server object that owns it.
"""

from __future__ import annotations

import json
import os
import queue
import signal as signals
import subprocess
import threading
from typing import IO, Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

from ._client import ElicitationRequest, Progress
from ._errors import MCPError
from ._rpc import Message, RPCSession, logger
from ._server import MCPServerBase, Transport

__all__ = ["MCPServerStdio"]

PathLike = Union[str, "os.PathLike[str]"]

# What a server inherits from our environment (the rest, API keys included, stays here);
# ``env`` adds to it. The same list the reference clients use, plus locale and TZ.
_INHERITED = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "LC_ALL",
              "LC_CTYPE", "TMPDIR", "TZ")
_INHERITED_NT = ("APPDATA", "HOMEDRIVE", "HOMEPATH", "LOCALAPPDATA", "PATH", "PATHEXT",
                 "PROCESSOR_ARCHITECTURE", "SYSTEMDRIVE", "SYSTEMROOT", "TEMP", "TMP",
                 "USERNAME", "USERPROFILE", "COMSPEC", "WINDIR")
_TAIL_BYTES = 2000  # how much of stderr an error message quotes
_GRACE_S = 1.0  # after closing stdin, and again after terminating, before the next step


def _environment(extra: Optional[Mapping[str, str]]) -> Dict[str, str]:
    names = _INHERITED_NT if os.name == "nt" else _INHERITED
    env = {k: os.environ[k] for k in names if k in os.environ}
    env.update(extra or {})
    return env


class _StdioTransport(Transport):
    def __init__(self, server: str, argv: List[str], env: Dict[str, str],
                 cwd: Optional[PathLike], max_message_bytes: int) -> None:
        self.session = RPCSession(server, self.send)
        self._max = max_message_bytes
        self._lock = threading.Lock()
        self._closing = False
        self._tail = b""
        self._queue: queue.SimpleQueue[Optional[bytes]] = queue.SimpleQueue()
        try:
            self.process = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env=env, cwd=cwd, start_new_session=os.name != "nt")
        except (OSError, ValueError) as exc:
            raise MCPError(server, "start", f"could not run {argv[0]!r}: {exc}") from exc
        self._stderr = threading.Thread(target=self._drain_stderr, daemon=True,
                                        name="lattice-mcp-stderr")
        self._threads = [
            threading.Thread(target=self._read, daemon=True, name="lattice-mcp-reader"),
            threading.Thread(target=self._write, daemon=True, name="lattice-mcp-writer"),
            self._stderr]
        for thread in self._threads:
            thread.start()

    # -- sending ---------------------------------------------------------------------------
    def send(self, message: Message) -> None:
        failure = self.session.failure
        if failure is not None:
            raise failure
        data = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        self._queue.put(data + b"\n")

    def _write(self) -> None:
        stdin = self.process.stdin
        assert stdin is not None
        try:
            while True:
                data = self._queue.get()
                if data is None:
                    break
                stdin.write(data)
                stdin.flush()
        except (OSError, ValueError) as exc:
            self._ended(f"writing to its stdin failed: {exc}")
        finally:
            try:
                stdin.close()
            except (OSError, ValueError):
                pass

    # -- receiving -------------------------------------------------------------------------
    def _read(self) -> None:
        stdout = self.process.stdout
        assert stdout is not None
        cause = "its stdout closed"
        try:
            while True:
                line = stdout.readline(self._max + 1)
                if not line:
                    break
                if len(line) > self._max:
                    self.session.fail("protocol", f"the server sent a message of more than "
                                                  f"{self._max} bytes; the session is over")
                    return
                self._line(line)
        except (OSError, ValueError) as exc:
            cause = f"reading its stdout failed: {exc}"
        self._ended(cause)

    def _line(self, line: bytes) -> None:
        line = line.strip()
        if not line:
            return
        try:
            self.session.receive_data(line)
        except Exception:  # a bug of ours must not stop the reader (every call would hang)
            logger.exception("MCP server %r: could not handle %r", self.session.server,
                             line[:200])

    def _drain_stderr(self) -> None:
        stderr = self.process.stderr
        assert stderr is not None
        try:
            while True:
                chunk = stderr.read1(65536)  # type: ignore[attr-defined]
                if not chunk:
                    return
                with self._lock:
                    self._tail = (self._tail + chunk)[-_TAIL_BYTES:]
                for text in chunk.decode("utf-8", "replace").splitlines():
                    logger.debug("MCP server %r stderr: %s", self.session.server, text)
        except (OSError, ValueError):
            return

    def _ended(self, cause: str) -> None:
        """stdout or stdin is gone: the process exited (or is about to). Tell every waiter."""
        with self._lock:
            closing = self._closing
        if closing:
            self.session.fail("closed", "the server was closed")
            return
        try:
            code: Optional[int] = self.process.wait(timeout=_GRACE_S)
        except subprocess.TimeoutExpired:
            code = None
        self._stderr.join(_GRACE_S / 2)  # let stderr's last words arrive
        if code is None:
            what = f"the server stopped talking ({cause})"
        elif code < 0:
            what = f"the server process was killed by signal {-code}"
        else:
            what = f"the server process exited with code {code}"
        with self._lock:
            tail = self._tail.decode("utf-8", "replace").strip()
        if tail:
            what += f"; the end of its stderr:\n{tail}"
        self.session.fail("closed", what + self.session.noise_note())

    # -- closing ---------------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            if self._closing:
                return
            self._closing = True
        self.session.fail("closed", "the server was closed")
        self._queue.put(None)  # the writer closes stdin after what is queued
        process = self.process
        if not _waited(process, _GRACE_S):
            self._signal(signals.SIGTERM)
            if not _waited(process, _GRACE_S):
                self._signal(getattr(signals, "SIGKILL", signals.SIGTERM))
                process.wait()
        self._signal(signals.SIGTERM)  # anything it started and left behind, in its group
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(_GRACE_S)
        for pipe in (process.stdout, process.stderr):
            _close(pipe)

    def _signal(self, number: int) -> None:
        try:
            if os.name == "nt":
                if number == signals.SIGTERM:
                    self.process.terminate()
                else:
                    self.process.kill()
            else:
                os.killpg(self.process.pid, number)
        except (OSError, ValueError):
            pass  # already gone


def _waited(process: subprocess.Popen[bytes], seconds: float) -> bool:
    try:
        process.wait(timeout=seconds)
        return True
    except subprocess.TimeoutExpired:
        return False


def _close(pipe: Optional[IO[bytes]]) -> None:
    if pipe is not None:
        try:
            pipe.close()
        except (OSError, ValueError):
            pass


class MCPServerStdio(MCPServerBase):
    """An MCP server run as a subprocess, spoken to over its stdin and stdout.

    Args:
        command: The program to run, e.g. ``"python"``, ``"npx"``, ``"uvx"``.
        args: Its arguments.
        env: Environment variables for it, on top of a minimal inherited set (PATH, HOME,
            locale...): the rest of this process's environment, API keys included, is not
            passed on.
        cwd: Its working directory.
        name: Used in error messages and logs; default: the name the server gives.
        timeout_ms: Bound on ``start()`` (spawn and handshake) and on each request.
        tool_prefix: Put before each tool's name (e.g. ``"time_"``).
        allowed_tools: Only these tools (the server's own names); None: all.
        protocol_version: None (default): the ``initialize`` handshake (a legacy server may
            never answer anything else first); ``"2026-07-28"``: the modern wire.
        on_elicitation, roots, on_progress, resources_as_tools: as for every server
            (``MCPServerBase``).
    """

    max_message_bytes = 64 * 1024 * 1024  # one line from the server; more ends the session

    def __init__(self, command: str, args: Sequence[str] = (), *,
                 env: Optional[Mapping[str, str]] = None, cwd: Optional[PathLike] = None,
                 name: Optional[str] = None, timeout_ms: int = 60000, tool_prefix: str = "",
                 allowed_tools: Optional[Sequence[str]] = None,
                 protocol_version: Optional[str] = None,
                 on_elicitation: Optional[Callable[[ElicitationRequest], Any]] = None,
                 roots: Optional[List[Dict[str, Any]]] = None,
                 on_progress: Optional[Callable[[Progress], Any]] = None,
                 resources_as_tools: bool = False) -> None:
        if not isinstance(command, str) or not command:
            raise ValueError(f"command must be a non-empty str, got {command!r}")
        if isinstance(args, str) or not all(isinstance(a, str) for a in args):
            raise ValueError(f"args must be a list of str, got {args!r}")
        if env is not None and not (isinstance(env, Mapping) and all(
                isinstance(k, str) and isinstance(v, str) for k, v in env.items())):
            raise ValueError("env must be a dict of str to str")  # values may be secrets
        self.command = command
        self.args = list(args)
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        super().__init__(name=name, timeout_ms=timeout_ms, tool_prefix=tool_prefix,
                         allowed_tools=allowed_tools, protocol_version=protocol_version,
                         on_elicitation=on_elicitation, roots=roots,
                         on_progress=on_progress, resources_as_tools=resources_as_tools)

    def _default_name(self) -> str:
        return os.path.basename(self.command)

    def _open(self, timeout_ms: int) -> _StdioTransport:
        return _StdioTransport(self.name, [self.command, *self.args], _environment(self.env),
                               self.cwd, self.max_message_bytes)

    def __repr__(self) -> str:
        # Arguments and environment may hold secrets (tokens): only the command is shown.
        state = "running" if self.running else "not running"
        return f"<MCPServerStdio {self.name!r} command={self.command!r} {state}>"

    def stderr_tail(self) -> str:
        """The last ~2000 bytes the server wrote to stderr ("" if not started)."""
        transport = self._transport
        if not isinstance(transport, _StdioTransport):
            return ""
        with transport._lock:
            return transport._tail.decode("utf-8", "replace")
