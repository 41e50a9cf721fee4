"""What every built-in HTTP client shares: the transport, the pooled session, the lifetime
(``close``/``with``) and ``create``. A client adds its codec: the headers it sends and
how a ``ModelRequest`` becomes a request body."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple, TypeVar

from .base import ModelRequest, ReplyDict
from .http import Transport
from .retry import RetryPolicy

if TYPE_CHECKING:  # pragma: no cover
    import requests

__all__ = ["HTTPModelClient"]

C = TypeVar("C", bound="HTTPModelClient")


class HTTPModelClient:
    """Base of ``AnthropicClient`` and ``OpenAIChatClient``. One client (and its pooled
    ``requests.Session``) may be shared by any number of threads and agents."""

    base_url: str
    stream: bool
    _transport: Transport

    def create(self, request: ModelRequest) -> ReplyDict:
        """Send one request; return the assistant dict (nothing partial)."""
        request.signal.throw_if_aborted()
        headers, secrets = self._headers()
        body, streaming = self._body(request)
        return self._transport.send(request, body, headers, secrets, streaming)

    def _headers(self) -> Tuple[Dict[str, str], List[str]]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _body(self, request: ModelRequest) -> Tuple[bytes, bool]:  # pragma: no cover
        raise NotImplementedError

    @property
    def retry_policy(self) -> RetryPolicy:
        return self._transport.retry_policy

    @property
    def timeout_ms(self) -> Optional[float]:
        return self._transport.timeout_ms

    @property
    def _session(self) -> Optional[requests.Session]:
        return self._transport.session

    def _get_session(self) -> requests.Session:
        return self._transport.get_session()

    def close(self) -> None:
        """Close the client's own session (a session given by the user is left open)."""
        self._transport.close()

    def __enter__(self: C) -> C:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(base_url={self.base_url!r}, stream={self.stream}, "
                f"max_retries={self.retry_policy.max_retries}, timeout_ms={self.timeout_ms!r})")
