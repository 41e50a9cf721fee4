"""libpq connection strings, read without libpq: for pg8000, and for a repr without secrets.

Both libpq forms are accepted: ``key=value`` pairs (``host=/run/postgresql dbname=app
password='a b'``) and URIs (``postgresql://user:secret@db.example:5432/app?sslmode=require``).
Errors never quote a password.
"""

from __future__ import annotations

import os
import re
from typing import Any, Dict, List
from urllib.parse import unquote

__all__ = ["parse_conninfo", "redacted", "pg8000_arguments"]

_KEY = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*")
_URI = re.compile(r"^postgres(?:ql)?://", re.IGNORECASE)
_SECRET_KEYS = ("password", "sslpassword")
# What pg8000 can be told; anything else in a conninfo is refused rather than ignored.
_PG8000_KEYS = frozenset({
    "host", "hostaddr", "port", "dbname", "user", "password", "connect_timeout",
    "application_name", "sslmode", "sslrootcert", "options", "keepalives",
})


def parse_conninfo(text: str) -> Dict[str, str]:
    """The parameters of a libpq connection string (either form).

    Raises:
        ValueError: malformed text (the message gives the position, never the value).
    """
    if not isinstance(text, str):
        raise ValueError(f"conninfo must be a str, got {type(text).__name__}")
    if _URI.match(text):
        return _parse_uri(text)
    return _parse_pairs(text)


def _parse_pairs(text: str) -> Dict[str, str]:
    params: Dict[str, str] = {}
    pos = 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos == len(text):
            return params
        match = _KEY.match(text, pos)
        if match is None:
            raise ValueError(f"conninfo: expected key=value at character {pos + 1}")
        key, pos = match.group(1), match.end()
        value: List[str] = []
        if pos < len(text) and text[pos] == "'":
            pos += 1
            while True:
                if pos >= len(text):
                    raise ValueError(f"conninfo: unterminated quoted value for {key!r}")
                char = text[pos]
                if char == "\\" and pos + 1 < len(text):
                    value.append(text[pos + 1])
                    pos += 2
                elif char == "'":
                    pos += 1
                    break
                else:
                    value.append(char)
                    pos += 1
        else:
            while pos < len(text) and not text[pos].isspace():
                if text[pos] == "\\" and pos + 1 < len(text):
                    pos += 1
                value.append(text[pos])
                pos += 1
        params[key] = "".join(value)


def _parse_uri(text: str) -> Dict[str, str]:
    rest = _URI.sub("", text, count=1)
    rest, _, query = rest.partition("?")
    authority, slash, path = rest.partition("/")
    params: Dict[str, str] = {}
    if "@" in authority:
        userinfo, _, authority = authority.rpartition("@")
        user, colon, password = userinfo.partition(":")
        if user:
            params["user"] = unquote(user)
        if colon:
            params["password"] = unquote(password)
    if "," in authority:
        raise ValueError("conninfo: several hosts in one URI are not supported")
    if authority.startswith("["):  # [IPv6]:port
        host, bracket, port = authority[1:].partition("]")
        if not bracket or (port and not port.startswith(":")):
            raise ValueError("conninfo: malformed [IPv6] host in URI")
        port = port[1:]
    else:
        host, _, port = authority.partition(":")
    if host:
        params["host"] = unquote(host)
    if port:
        params["port"] = port
    if slash and path:
        params["dbname"] = unquote(path)
    for item in filter(None, query.split("&")):
        key, equals, value = item.partition("=")
        if not equals or not key:
            raise ValueError("conninfo: malformed query parameter in URI")
        params[unquote(key)] = unquote(value)
    return params


def redacted(params: Dict[str, str]) -> str:
    """``params`` as ``key=value`` text with every secret replaced by ``***``."""
    shown = []
    for key, value in params.items():
        if key in _SECRET_KEYS:
            value = "***"
        elif not value or any(c.isspace() or c in "'\\" for c in value):
            value = "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
        shown.append(f"{key}={value}")
    return " ".join(shown)


def pg8000_arguments(params: Dict[str, str]) -> Dict[str, Any]:
    """Keyword arguments for ``pg8000.dbapi.connect`` meaning what libpq would make of
    ``params`` (with libpq's ``PG*`` environment defaults). A ``host`` starting with ``/``
    is a socket directory, as in libpq.

    Raises:
        ValueError: a parameter pg8000 cannot honour (named; its value is not shown).
    """
    unknown = sorted(set(params) - _PG8000_KEYS)
    if unknown:
        raise ValueError(f"conninfo: pg8000 does not support the parameter(s) {unknown}; "
                         "install psycopg or pass connect=")
    env = os.environ
    user = params.get("user") or env.get("PGUSER") or _os_user()
    host = params.get("hostaddr") or params.get("host") or env.get("PGHOST") or _default_host()
    port_text = params.get("port") or env.get("PGPORT") or "5432"
    if not port_text.isdigit():
        raise ValueError("conninfo: port must be a number")
    port = int(port_text)
    args: Dict[str, Any] = {
        "user": user,
        "database": params.get("dbname") or env.get("PGDATABASE") or user,
        "password": params.get("password", env.get("PGPASSWORD")),
    }
    if host.startswith("/"):
        args["unix_sock"] = os.path.join(host, f".s.PGSQL.{port}")
    else:
        args["host"], args["port"] = host, port
    timeout = params.get("connect_timeout") or env.get("PGCONNECT_TIMEOUT")
    if timeout:
        if not timeout.isdigit():
            raise ValueError("conninfo: connect_timeout must be a whole number of seconds")
        args["timeout"] = int(timeout) or None  # libpq: 0 means wait forever
    if params.get("application_name"):
        args["application_name"] = params["application_name"]
    if params.get("options"):
        args["startup_params"] = {"options": params["options"]}
    ssl_context = _ssl_context(params.get("sslmode") or env.get("PGSSLMODE") or "prefer",
                               params.get("sslrootcert"))
    if ssl_context is not None:
        args["ssl_context"] = ssl_context
    return args


def _ssl_context(mode: str, root_cert: Any) -> Any:
    """pg8000's ``ssl_context`` for a libpq ``sslmode`` (pg8000 never falls back, so
    ``allow``/``prefer`` mean no TLS, as libpq does against a server without it)."""
    if mode in ("disable", "allow", "prefer"):
        return None
    import ssl

    if mode == "require":  # encrypted, server not verified: libpq's meaning
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    if mode in ("verify-ca", "verify-full"):
        context = ssl.create_default_context(cafile=root_cert)
        context.check_hostname = mode == "verify-full"
        return context
    raise ValueError(f"conninfo: unknown sslmode {mode!r}")


def _os_user() -> str:
    import getpass

    return getpass.getuser()


def _default_host() -> str:
    """libpq's compiled-in default on Debian-like systems: the socket directory if there."""
    for folder in ("/var/run/postgresql", "/tmp"):
        if os.path.exists(os.path.join(folder, ".s.PGSQL.5432")):
            return folder
    return "localhost"
