"""Who holds a session lock, and whether that holder is known to be dead (SPEC 21b).

A lock that outlives its holder (the SQLite lease) records who took it: the host name, the
boot id where the OS has one (``/proc/sys/kernel/random/boot_id``), the process id and that
process's start time (``/proc/<pid>/stat`` field 22, in clock ticks since boot). A process
that finds the lock held can then tell a holder that was ``kill -9``ed on its own host (no
such process any more, a zombie, or the pid reused by a process started at another time)
and take the lock over at once, instead of waiting out the lease.

Anything not known for sure counts as alive: a holder on another host (or another boot of
this one), in another PID namespace (a container sharing the host name and kernel, as with
host networking, numbers its processes apart: its pid 40 is not ours), a record of an
older version, a process this one may not signal. Those are waited for as before.
"""

from __future__ import annotations

import json
import os
import socket
from typing import Any, Dict, Optional

__all__ = ["describe", "is_dead"]

_boot_id: Optional[str] = None
_boot_read = False


def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def boot_id() -> Optional[str]:
    """This boot's id on Linux, else None (read once: it does not change while we run)."""
    global _boot_id, _boot_read
    if not _boot_read:
        text = _read("/proc/sys/kernel/random/boot_id")
        _boot_id = text.strip() or None if text is not None else None
        _boot_read = True
    return _boot_id


def _stat(pid: int) -> Optional[Dict[str, Any]]:
    """``{"state": ..., "start": ...}`` of ``pid`` from ``/proc``, or None where there is
    no ``/proc`` or no such process."""
    text = _read(f"/proc/{pid}/stat")
    if text is None:
        return None
    # "pid (comm) state ppid ..."; comm may hold spaces and parentheses: split after the last.
    fields = text[text.rfind(")") + 2:].split()
    try:
        return {"state": fields[0], "start": int(fields[19])}  # fields 3 and 22 of stat(5)
    except (IndexError, ValueError):
        return None


def pid_namespace() -> Optional[str]:
    """This process's PID namespace (``pid:[4026531836]``) where the OS says, else None."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except (OSError, AttributeError):
        return None


def describe(nonce: str) -> str:
    """This process as a lock holder: JSON text with host, boot id, pid, start time and
    ``nonce`` (which tells two holds of one process apart)."""
    pid = os.getpid()
    stat = _stat(pid)
    return json.dumps({"host": socket.gethostname(), "boot": boot_id(),
                       "pidns": pid_namespace(), "pid": pid,
                       "start": None if stat is None else stat["start"], "nonce": nonce},
                      separators=(",", ":"))


def is_dead(recorded: str) -> bool:
    """True only when ``recorded`` (a ``describe`` text) names a process of this host and
    boot that is known to be gone: no such pid, a zombie, or a pid now used by a process
    that started at another time."""
    try:
        holder = json.loads(recorded)
        host, boot, pid, start = holder["host"], holder["boot"], holder["pid"], holder["start"]
    except (ValueError, TypeError, KeyError):
        return False  # an older version's owner text: nothing known about it
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    if host != socket.gethostname() or boot != boot_id():
        return False  # another host (or a boot id we cannot compare): wait as before
    if holder.get("pidns") != pid_namespace():
        return False  # another container on this kernel: its pids are not ours to look up
    if pid == os.getpid():
        return False  # this process is alive; its own holds are its business
    stat = _stat(pid)
    if stat is not None:
        return stat["state"] in ("Z", "X") or (start is not None and stat["start"] != start)
    if boot is not None:
        return True  # this host has /proc (it gave a boot id), and the pid is not there
    try:
        os.kill(pid, 0)  # no /proc: whether the pid exists is all there is to know
    except ProcessLookupError:
        return True
    except OSError:
        return False  # exists, owned by another user
    return False
