"""The bare ``requests`` floor's session, configured as lattice's own session is.

A fair floor pays for what lattice must do on every request: ``trust_env = False`` (lattice
reads the proxy environment once, not per request) and the connect/read timeouts lattice
always sends (``lattice/models/http.py``: 10 s and 600 s). A socket with a timeout waits in
``poll()`` before each send and receive, one more system call and GIL hand-back each,
which a client without timeouts skips and could hang forever on a dead server.
``http_floor.py`` prints what the timeouts cost the floor (``SETTINGS["timeouts"] = False``
for the floor without them).
"""

from __future__ import annotations

from typing import Any, Dict

import requests

TIMEOUT = (10.0, 600.0)  # lattice's (_CONNECT_TIMEOUT, _READ_TIMEOUT)
SETTINGS: Dict[str, bool] = {"timeouts": True}


class _TimedSession(requests.Session):
    def request(self, method: Any, url: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        kwargs.setdefault("timeout", TIMEOUT)
        return super().request(method, url, **kwargs)


def floor_session() -> requests.Session:
    """A session for a bare loop: lattice's timeouts (unless switched off), no env."""
    session = _TimedSession() if SETTINGS["timeouts"] else requests.Session()
    session.trust_env = False
    return session
