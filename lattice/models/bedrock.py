"""``AnthropicBedrockClient``: the Messages API through AWS Bedrock Runtime.

A codec plus a signer on the shared transport (``http.py``): the body is the Messages body
(``wire.py``) without ``model`` and ``stream`` and with Bedrock's ``anthropic_version``;
the model id is one path segment of the URL; every attempt is signed afresh with AWS
Signature Version 4 (``sigv4.py``; the date is part of the signature); streams are
event-stream frames (``eventstream.py``) whose chunks feed the same message assembler as
the Anthropic client's SSE (``bedrock_wire.py``). Credentials and region come from the
arguments, the environment or the shared AWS files (``aws_config.py``).
"""

from __future__ import annotations

import base64
import json
from typing import (
    TYPE_CHECKING,
    Callable,
    Dict,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
)
from urllib.parse import quote

from ..errors import APIStatusError, RequestTimeoutError
from .aws_config import profile_exists, resolve_credentials, resolve_region
from .base import ModelRequest, ReplyDict
from .bedrock_wire import (
    REQUEST_ID_HEADER,
    ModelTimeoutError,
    bedrock_error,
    parse_event_stream,
)
from .body import DEFAULT_MAX_RESPONSE_BYTES
from .budget import DEFAULT_IDLE_TIMEOUT_MS
from .client import HTTPModelClient, count_reader
from .http import EventCallback
from .options import REGION_NAME, check_secret, check_version, resolve_base_url, secrets_of
from .retry import RetryPolicy
from .sigv4 import Credentials, sign_headers
from .wire import dump_body, message_from_json, reply_from_message, request_dict

if TYPE_CHECKING:  # pragma: no cover
    import requests
else:  # annotations only (get_type_hints): requests is imported when a request is made
    from .annotations import requests

__all__ = ["AnthropicBedrockClient", "BEDROCK_VERSION", "EVENT_STREAM"]

BEDROCK_VERSION = "bedrock-2023-05-31"
EVENT_STREAM = "application/vnd.amazon.eventstream"




class BedrockCodec:
    """How the transport reads Bedrock Runtime replies and errors."""

    api = "Bedrock Runtime"
    request_id_header = REQUEST_ID_HEADER
    stream_type = EVENT_STREAM

    def read_json(self, content: bytes) -> ReplyDict:
        return reply_from_message(message_from_json(content))

    def read_stream(self, chunks: Iterator[bytes], on_event: Optional[EventCallback],
                    limit: int) -> ReplyDict:
        return reply_from_message(parse_event_stream(chunks, on_event, limit))

    def error(self, status: int, headers: Mapping[str, str], content: bytes,
              secrets: Sequence[str]) -> APIStatusError:
        return bedrock_error(status, headers, content, secrets)


class AnthropicBedrockClient(HTTPModelClient):
    """Claude on AWS Bedrock (``InvokeModel`` / ``InvokeModelWithResponseStream``); a
    ``ModelClient`` for ``lattice.Agent``. Thread-safe; no ``botocore`` needed.

    Args:
        region: default ``AWS_REGION``, ``AWS_DEFAULT_REGION``, then the profile's
            ``region`` in the AWS config file.
        access_key_id, secret_access_key, session_token: explicit credentials (both of the
            first two, or neither). Else ``profile=``, else ``AWS_ACCESS_KEY_ID``/
            ``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN``, else the shared credentials
            and config files (profile ``AWS_PROFILE`` or ``default``), read at each call.
        profile: a profile of the shared files; it wins over the environment's keys.
        base_url: default ``ANTHROPIC_BEDROCK_BASE_URL``, else
            ``https://bedrock-runtime.{region}.amazonaws.com`` (a VPC endpoint or the mock).
        stream, max_retries, default_headers, session, timeout_ms, retry_policy,
            max_response_bytes, stream_idle_timeout_ms, model: as ``AnthropicClient``.
            Every retry is signed again. An ``anthropic-beta`` default header goes in the
            body as ``anthropic_beta`` (where Bedrock reads betas).
        anthropic_version: the body's ``anthropic_version``: ``"bedrock-2023-05-31"``
            (the default) or a dated one (``"2023-06-01"``), as newer SDKs send.

    The model is a Bedrock model id (``anthropic.claude-sonnet-4-5-20250929-v1:0``), an
    inference profile id (``us.anthropic...``) or an inference profile ARN.
    """

    provider_name = "aws.bedrock"

    def __init__(
        self,
        *,
        region: Optional[str] = None,
        access_key_id: Optional[str] = None,
        secret_access_key: Optional[str] = None,
        session_token: Optional[str] = None,
        profile: Optional[str] = None,
        base_url: Optional[str] = None,
        stream: bool = True,
        max_retries: int = 2,
        default_headers: Optional[Mapping[str, str]] = None,
        session: Optional[requests.Session] = None,
        timeout_ms: Optional[float] = None,
        retry_policy: Optional[RetryPolicy] = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        stream_idle_timeout_ms: Optional[float] = DEFAULT_IDLE_TIMEOUT_MS,
        anthropic_version: str = BEDROCK_VERSION,
        model: Optional[str] = None,
    ) -> None:
        self.anthropic_version = check_version(anthropic_version)
        self._credentials = _given_credentials(access_key_id, secret_access_key,
                                               session_token)
        self._profile = _given_profile(profile, self._credentials is None)
        options = self._check_options(
            stream=stream, max_retries=max_retries, default_headers=default_headers,
            session=session, timeout_ms=timeout_ms, retry_policy=retry_policy,
            max_response_bytes=max_response_bytes, model=model,
            stream_idle_timeout_ms=stream_idle_timeout_ms)
        if region is not None and (not isinstance(region, str) or not region.strip()):
            raise ValueError(f"region must be a non-empty str or None, got {region!r}")
        found = resolve_region(region, self._profile)
        if found is None:
            raise ValueError("region: pass region= or set AWS_REGION (or AWS_DEFAULT_REGION,"
                             " or region in the AWS config file)")
        if not REGION_NAME.fullmatch(found):  # it goes in the host name: nothing else may
            raise ValueError(f"region must be an AWS region name (letters, digits and "
                             f"dashes, such as us-east-1), got {found!r}")
        self.region = found
        headers = self._default_headers
        # Bedrock reads betas from the body (anthropic_beta), not from a header.
        self._betas = [beta.strip() for name, value in headers.items()
                       if name.lower() == "anthropic-beta" for beta in value.split(",")
                       if beta.strip()]
        self._default_headers = {k: v for k, v in headers.items()
                                 if k.lower() != "anthropic-beta"}
        self.base_url = resolve_base_url(base_url, "ANTHROPIC_BEDROCK_BASE_URL",
                                         f"https://bedrock-runtime.{found}.amazonaws.com")
        self._make_transport(self.base_url, BedrockCodec(), options)

    def create(self, request: ModelRequest) -> ReplyDict:
        """Send one request; return the assistant dict (nothing partial)."""
        request.signal.throw_if_aborted()
        request = self._own_model(request)
        body, streaming = self._body(request)
        return self._signed_send(request, body, streaming, "invoke-with-response-stream"
                                 if streaming else "invoke")

    def count_tokens(self, request: ModelRequest) -> int:
        """The input tokens ``request`` would use: Bedrock's ``CountTokens`` (free) with
        the InvokeModel body. Bedrock counts for foundation-model ids, not inference
        profiles (a ``ValidationException`` says so)."""
        request.signal.throw_if_aborted()
        request = self._own_model(request)
        invoke, _ = self._body(request)
        body = json.dumps({"input": {"invokeModel": {
            "body": base64.b64encode(invoke).decode("ascii")}}}).encode("utf-8")
        reply = self._signed_send(request, body, False, "count-tokens",
                                  read_json=count_reader("inputTokens"))
        return int(reply["inputTokens"])

    def _signed_send(self, request: ModelRequest, body: bytes, streaming: bool,
                     operation: str, *, read_json: Optional[Callable[[bytes], ReplyDict]] = None
                     ) -> ReplyDict:
        """POST ``body`` to ``/model/{model}/{operation}``, each attempt signed afresh."""
        credentials = resolve_credentials(self._credentials, self._profile)
        url = f"{self.base_url}/model/{quote(str(request.model), safe='')}/{operation}"
        headers, secrets = self._headers()
        if streaming:
            headers.update({"accept": EVENT_STREAM, "x-amzn-bedrock-accept": "application/json"})
            headers.update(self._default_headers)
        secrets = sorted(set(secrets) | set(secrets_of(
            {}, credentials.secret_access_key, credentials.session_token)), key=len,
            reverse=True)
        region = self.region

        def sign(url: str, body: bytes, headers: Dict[str, str]) -> Dict[str, str]:
            signed = sign_headers("POST", url, headers, body, credentials=credentials,
                                  region=region, service="bedrock")
            return {**headers, **signed}

        try:
            return self._transport.send(request, body, headers, secrets, streaming, url=url,
                                        sign=sign, read_json=read_json)
        except ModelTimeoutError as exc:
            raise RequestTimeoutError(f"Bedrock model timed out: {exc.message}") from exc

    def _body(self, request: ModelRequest) -> Tuple[bytes, bool]:
        body = request_dict(request, stream=self.stream)
        body.pop("model", None)
        streaming = body.pop("stream", None) is True
        body.setdefault("anthropic_version", self.anthropic_version)
        if self._betas:
            body.setdefault("anthropic_beta", self._betas)
        return dump_body(body, self._entries), streaming

    def _headers(self) -> Tuple[Dict[str, str], List[str]]:
        return self._json_headers({})

    def __repr__(self) -> str:
        return (f"AnthropicBedrockClient(region={self.region!r}, base_url={self.base_url!r}, "
                f"stream={self.stream}, max_retries={self.retry_policy.max_retries}, "
                f"timeout_ms={self.timeout_ms!r})")


def _given_credentials(access_key_id: Optional[str], secret_access_key: Optional[str],
                       session_token: Optional[str]) -> Optional[Credentials]:
    key_id = check_secret("access_key_id", access_key_id)
    secret = check_secret("secret_access_key", secret_access_key)
    token = check_secret("session_token", session_token)
    if (key_id is None) != (secret is None):
        raise ValueError("access_key_id and secret_access_key go together: pass both "
                         "or neither")
    if token is not None and key_id is None:
        raise ValueError("session_token needs access_key_id and secret_access_key")
    return Credentials(key_id, secret, token) if key_id and secret else None


def _given_profile(profile: Optional[str], needed: bool) -> Optional[str]:
    """``profile`` checked: a non-empty str naming a profile of the shared files (when
    the client has no keys of its own, which would win over it)."""
    if profile is not None and (not isinstance(profile, str) or not profile.strip()):
        raise ValueError(f"profile must be a non-empty str or None, got {profile!r}")
    name = profile.strip() if profile else None
    if name is not None and needed and not profile_exists(name):
        raise ValueError(f"profile {name!r} is in neither the AWS shared credentials file "
                         "nor the config file")
    return name
