"""The Bedrock and Vertex faces of ``MockMessagesServer``: the same scripted replies behind
the cloud routes, checked as strictly as the real services check them.

Bedrock: ``POST /model/{modelId}/invoke`` (JSON) and ``/invoke-with-response-stream``
(event-stream frames, each ``chunk`` carrying the base64 of one Messages stream event).
``/model/{modelId}/count-tokens`` counts (``{"inputTokens": n}``).
Every request's AWS Signature Version 4 is verified against the server's
``bedrock_credentials``: an unknown access key id gets 403 ``UnrecognizedClientException``,
a wrong signature 403 ``InvalidSignatureException`` (Bedrock's words), a date more than
5 minutes off 403 too, and so does a credential scope whose service is not ``bedrock``,
whose region is not a region name or whose date is not the request's; a body with
``model`` or ``stream``, or without an ``anthropic_version`` of ``"bedrock-2023-05-31"`` or
a dated one (``YYYY-MM-DD``, as the official SDKs send now), 400 ``ValidationException``. Errors are
Bedrock-shaped: ``{"message": ...}`` with ``x-amzn-ErrorType``; every reply carries
``x-amzn-RequestId``. A scripted ``error(...)`` is named from its ``type`` when that ends
in ``Exception`` (else from the status: 400 ``ValidationException``, 429
``ThrottlingException``, ...); ``stream_error(...)`` sends an exception frame.

Vertex: ``POST /v1/projects/{p}/locations/{r}/publishers/anthropic/models/{m}:rawPredict``
and ``:streamRawPredict`` (and ``models/count-tokens:rawPredict``, counting) need
``Authorization: Bearer`` (the server's ``vertex_token``
when set, else any) and ``anthropic_version`` ``"vertex-2023-10-16"`` or a dated one,
without ``model``; they
answer as the Messages route does (SSE for ``streamRawPredict``).
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import hmac
import json
import re
from typing import TYPE_CHECKING, Any, Dict, List, Optional
from urllib.parse import unquote

from ..models.eventstream import encode_frame
from ..models.sigv4 import canonical_request, signing_key, string_to_sign
from ..models.wire import message_events
from ._mock_checks import count_tokens, request_problem
from ._mock_script import DEFAULT_TEXT, Fault

if TYPE_CHECKING:  # pragma: no cover
    from .mock_server import _Handler

__all__ = ["is_cloud_path", "answer_cloud", "bedrock_frames", "DEFAULT_BEDROCK_CREDENTIALS"]

DEFAULT_BEDROCK_CREDENTIALS = ("mock-access-key-id", "mock-secret-access-key")
_BEDROCK = re.compile(r"^/model/([^/]+)/(invoke|invoke-with-response-stream|count-tokens)$")
_VERTEX = re.compile(r"^(?:/v1)?/projects/([^/]+)/locations/([^/]+)/publishers/anthropic/"
                     r"models/([^/]+):(rawPredict|streamRawPredict)$")
_AUTH = re.compile(r"AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request,"
                   r"\s*SignedHeaders=([^,]+),\s*Signature=([0-9a-f]{64})$")
_NAMES = {400: "ValidationException", 403: "AccessDeniedException",
          404: "ResourceNotFoundException", 408: "ModelTimeoutException",
          424: "ModelErrorException", 429: "ThrottlingException",
          503: "ServiceUnavailableException"}
_STREAM_NAMES = {"overloaded_error": "serviceUnavailableException",
                 "rate_limit_error": "throttlingException", "api_error": "internalServerException",
                 "invalid_request_error": "validationException"}
_BAD_SIGNATURE = ("The request signature we calculated does not match the signature you "
                  "provided. Check your AWS Secret Access Key and signing method. Consult the "
                  "service documentation for details.")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_REGION = re.compile(r"[a-z]{2}(?:-[a-z]+)+-\d+")
_EVENT = {":event-type": "chunk", ":content-type": "application/json", ":message-type": "event"}


def is_cloud_path(path: str) -> bool:
    return path.startswith("/model/") or ":rawPredict" in path or ":streamRawPredict" in path


def bedrock_frames(events: List[Dict[str, Any]]) -> bytes:
    """Event-stream frames for Messages stream ``events``, as Bedrock sends them."""
    out = []
    for event in events:
        if event.get("type") == "message_stop":
            event = dict(event, **{"amazon-bedrock-invocationMetrics": {
                "inputTokenCount": 1, "outputTokenCount": 1, "invocationLatency": 1,
                "firstByteLatency": 1}})
        data = base64.b64encode(json.dumps(event, separators=(",", ":")).encode("utf-8")
                                ).decode("ascii")
        out.append(encode_frame(_EVENT, b'{"bytes":"%s"}' % data.encode("ascii")))
    return b"".join(out)


def answer_cloud(handler: _Handler, raw: bytes, path: str) -> None:
    """Answer a Bedrock or Vertex request (``path`` without its query)."""
    mock = handler.server.mock
    headers = {k.lower(): v for k, v in handler.headers.items()}
    bedrock, vertex = _BEDROCK.match(path), _VERTEX.match(path)
    if bedrock is None and vertex is None:
        _bedrock_error(handler, Fault("error", status=404, message=f"no route {path}",
                                      error_type="UnknownOperationException"))
        return
    if bedrock is not None:
        problem = _signature_problem(handler, headers, raw, mock.bedrock_credentials)
        if problem is not None:
            _bedrock_error(handler, problem)
            return
    elif not _bearer_ok(headers.get("authorization", ""), mock.vertex_token):
        handler._json(401, {"error": {"code": 401, "status": "UNAUTHENTICATED", "message":
                                      "Request had invalid authentication credentials. "
                                      "Expected OAuth 2 access token."}})
        return
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    model = unquote(bedrock.group(1)) if bedrock is not None else (
        vertex.group(3) if vertex is not None else "")
    if bedrock is not None and bedrock.group(2) == "count-tokens":
        _count_bedrock(handler, body, headers, model)
        return
    if vertex is not None and model == "count-tokens":
        _count_vertex(handler, body, headers)
        return
    problem_text = _body_problem(body, bedrock is not None, headers, model)
    if problem_text is not None:
        fault = Fault("error", status=400, message=problem_text)
        _bedrock_error(handler, fault) if bedrock else handler._error(fault)
        return
    script_body = dict(body, model=model)
    reply = mock._take(body, headers, script_body)
    if vertex is not None:
        stream = vertex.group(4) == "streamRawPredict" if mock.stream is None else mock.stream
        handler._answer(reply, script_body, len(raw), stream)
        return
    stream = bedrock is not None and bedrock.group(2) == "invoke-with-response-stream"
    _answer_bedrock(handler, reply, script_body, len(raw), stream)


def _count_bedrock(handler: _Handler, body: Any, headers: Dict[str, str], model: str) -> None:
    """Bedrock's ``CountTokens``: ``{"input": {"invokeModel": {"body": <base64>}}}``, the
    InvokeModel body checked as ``invoke`` checks it; ``{"inputTokens": n}``."""
    invoke = body.get("input", {}).get("invokeModel", {}) if isinstance(body, dict) else {}
    try:
        inner = json.loads(base64.b64decode(invoke.get("body", ""), validate=True))
    except (ValueError, TypeError, AttributeError):
        inner = None
    problem = _body_problem(inner, True, headers, model) if inner is not None else \
        "input.invokeModel.body: must be the base64 of an InvokeModel JSON body"
    if problem is not None:
        _bedrock_error(handler, Fault("error", status=400, message=problem))
        return
    handler._json(200, {"inputTokens": count_tokens(inner)},
                  {"x-amzn-RequestId": _request_id(handler)})


def _count_vertex(handler: _Handler, body: Any, headers: Dict[str, str]) -> None:
    """Vertex's ``count-tokens:rawPredict`` for Claude: the model in the body;
    ``{"input_tokens": n}``."""
    if not isinstance(body, dict) or not isinstance(body.get("model"), str):
        handler._error(Fault("error", status=400, message="model: Field required"))
        return
    counted = {k: v for k, v in body.items() if k != "anthropic_version"}
    problem = request_problem(counted, dict(headers, **{"anthropic-version": "2023-06-01"}),
                              count_tokens=True)
    if problem is not None:
        handler._error(Fault("error", status=400, message=problem))
        return
    handler._json(200, {"input_tokens": count_tokens(body)})


def _bearer_ok(value: str, expected: Optional[str]) -> bool:
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return False
    return expected is None or hmac.compare_digest(token.strip(), expected)


def _body_problem(body: Any, bedrock: bool, headers: Dict[str, str], model: str
                  ) -> Optional[str]:
    if not isinstance(body, dict):
        return "Malformed input request, please reformat your input and try again."
    legacy = "bedrock-2023-05-31" if bedrock else "vertex-2023-10-16"
    version = body.get("anthropic_version")
    if version != legacy and not _dated(version):
        return (f"anthropic_version: must be {legacy!r} or a dated version (YYYY-MM-DD), "
                f"got {version!r}")
    for key in ("model",) + (("stream",) if bedrock else ()):
        if key in body:
            return f"extraneous key [{key}] is not permitted"
    messages_body = {k: v for k, v in body.items() if k not in ("anthropic_version", "stream")}
    return request_problem(dict(messages_body, model=model),
                           dict(headers, **{"anthropic-version": "2023-06-01"}))


def _dated(version: Any) -> bool:
    """A dated ``anthropic_version`` (``2023-06-01``), as the official SDKs send now."""
    if not isinstance(version, str) or not _DATE.fullmatch(version):
        return False
    try:
        datetime.date.fromisoformat(version)
    except ValueError:
        return False
    return True


def _signature_problem(handler: _Handler, headers: Dict[str, str], raw: bytes,
                       credentials: Any) -> Optional[Fault]:
    key_id, secret = credentials
    found = _AUTH.match(headers.get("authorization", "").strip())
    if found is None:
        return Fault("error", status=403, error_type="MissingAuthenticationTokenException",
                     message="Missing Authentication Token")
    access, date, region, service, signed, signature = found.groups()
    if access != key_id:
        return Fault("error", status=403, error_type="UnrecognizedClientException",
                     message="The security token included in the request is invalid.")
    names = signed.split(";")
    stamp = headers.get("x-amz-date", "")
    scope = _scope_problem(date, region, service, stamp)
    if scope is not None:
        return Fault("error", status=403, error_type="InvalidSignatureException",
                     message=scope)
    if "host" not in names or "x-amz-date" not in names or (
            "x-amz-security-token" in headers and "x-amz-security-token" not in names):
        return Fault("error", status=403, error_type="InvalidSignatureException",
                     message=_BAD_SIGNATURE)
    try:
        when = datetime.datetime.strptime(stamp, "%Y%m%dT%H%M%SZ")
    except ValueError:
        return Fault("error", status=403, error_type="InvalidSignatureException",
                     message=_BAD_SIGNATURE)
    now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
    if abs((now - when).total_seconds()) > 300:
        return Fault("error", status=403, error_type="InvalidSignatureException",
                     message=f"Signature expired: {stamp} is now earlier than "
                     f"{now.strftime('%Y%m%dT%H%M%SZ')} - 5 min.")
    chosen = {name: headers.get(name, "") for name in names}
    canonical, _ = canonical_request("POST", "http://" + headers.get("host", "") + handler.path,
                                     chosen, hashlib.sha256(raw).hexdigest())
    key = signing_key(secret, date, region, service)
    expected = hmac.new(key, string_to_sign(stamp, f"{date}/{region}/{service}/aws4_request",
                                            canonical).encode("utf-8"),
                        hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, signature):
        return Fault("error", status=403, error_type="InvalidSignatureException",
                     message=_BAD_SIGNATURE)
    return None


def _scope_problem(date: str, region: str, service: str, stamp: str) -> Optional[str]:
    """What is wrong with a signature's credential scope (Bedrock's words), or None."""
    if service != "bedrock":
        return "Credential should be scoped to correct service: 'bedrock'. "
    if not _REGION.fullmatch(region):
        return "Credential should be scoped to a valid region. "
    if stamp[:8] != date:
        return (f"Date in Credential scope does not match YYYYMMDD from ISO-8601 version of "
                f"date from HTTP: '{date}' != '{stamp[:8]}', from '{stamp}'.")
    return None


def _request_id(handler: _Handler) -> str:
    return f"mock-{next(handler.server.mock._ids):08d}-0000-0000-0000-000000000000"


def _bedrock_error(handler: _Handler, fault: Fault) -> None:
    name = fault.error_type if (fault.error_type or "").endswith("Exception") else (
        _NAMES.get(fault.status) or ("InternalServerException" if fault.status >= 500
                                     else "ValidationException"))
    handler._write_json(fault.status, json.dumps({"message": fault.message}).encode("utf-8"),
                        {"x-amzn-RequestId": _request_id(handler), "x-amzn-ErrorType":
                         f"{name}:http://internal.amazon.com/coral/com.amazon.bedrock/"},
                        fault.headers)


def _start(handler: _Handler) -> None:
    handler._start_chunked("application/vnd.amazon.eventstream", {
        "x-amzn-RequestId": _request_id(handler),
        "x-amzn-bedrock-content-type": "application/json"})


def _exception_frame(fault: Fault) -> bytes:
    kind = fault.error_type or "overloaded_error"
    name = _STREAM_NAMES.get(kind) or (kind[:1].lower() + kind[1:] if kind.endswith(
        "Exception") else "internalServerException")
    return encode_frame({":exception-type": name, ":content-type": "application/json",
                         ":message-type": "exception"},
                        json.dumps({"message": fault.message}).encode("utf-8"))


def _answer_bedrock(handler: _Handler, reply: Any, body: Dict[str, Any], size: int,
                    stream: bool) -> None:
    mock = handler.server.mock
    if not isinstance(reply, Fault):
        message = mock._message(reply, body, size)
        if not stream:
            handler._json(200, message, {"x-amzn-RequestId": _request_id(handler)})
            return
        _start(handler)
        handler._chunk(bedrock_frames(message_events(message)))
        handler._end_stream()
    elif reply.kind == "error":
        _bedrock_error(handler, reply)
    elif reply.kind == "delay":
        mock._closing.wait(reply.seconds)
        _answer_bedrock(handler, reply.reply, body, size, stream)
    elif reply.kind == "raw_sse":  # raw bytes of the body (latin-1 keeps them as given)
        _start(handler)
        data, step = reply.text.encode("latin-1"), reply.chunk_size or 1 << 30
        for i in range(0, len(data), step):
            handler._chunk(data[i : i + step])
        handler._end_stream()
    else:  # hang, cut, stream_error, trickle: part of a reply first
        events = message_events(mock._message(reply.reply or DEFAULT_TEXT, body, size))
        count = 1 if reply.kind == "trickle" else reply.after_events or 0
        if reply.kind == "hang" and reply.after_events is None:
            mock._closing.wait()
            handler.close_connection = True
            return
        _start(handler)
        handler._chunk(bedrock_frames(events[:count]))
        if reply.kind == "stream_error":
            handler._chunk(_exception_frame(reply))
            handler._end_stream()
            return
        if reply.kind in ("hang", "trickle"):
            mock._closing.wait()
        handler.close_connection = True
