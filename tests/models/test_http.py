"""The shared HTTP transport (``lattice.models.http``) and client options, for both clients.

Issue 13's transport items: keys with whitespace, header values never shown, a bad header
not retried, request ids cleaned, the ``/v1`` hint, readable connection errors, a DEBUG
line of what is sent, a clear error without ``requests``, JSON nested too deep, and the
SSE line splitter staying linear on one huge event.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

import pytest
import requests
import responses

from lattice.errors import APIConnectionError, AuthenticationError, NotFoundError
from lattice.models.anthropic import AnthropicClient
from lattice.models.base import ModelRequest
from lattice.models.openai import OpenAIChatClient
from lattice.models.sse import iter_lines
from lattice.testing import MockMessagesServer

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-test-0123456789abcdef-SECRET"
ENV = {"anthropic": ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "https://api.anthropic.com",
                     "/v1/messages"),
       "openai": ("OPENAI_API_KEY", "OPENAI_BASE_URL", "https://api.openai.com/v1",
                  "/chat/completions")}
CLIENTS: Dict[str, Callable[..., Any]] = {"anthropic": AnthropicClient,
                                          "openai": OpenAIChatClient}
PROVIDERS = pytest.mark.parametrize("provider", ["anthropic", "openai"])


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL",
                 "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


def url_of(provider: str) -> str:
    return ENV[provider][2] + ENV[provider][3]


def request(**kwargs: Any) -> ModelRequest:
    kwargs.setdefault("model", "model-test")
    kwargs.setdefault("messages", [{"role": "user", "content": "Hello"}])
    return ModelRequest(**kwargs)


def ok_body(provider: str) -> Dict[str, Any]:
    if provider == "anthropic":
        return {"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
                "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn",
                "usage": {"input_tokens": 1, "output_tokens": 1}}
    return {"id": "chatcmpl-1", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "hi"}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


def sent_key(provider: str, headers: Any) -> str:
    if provider == "anthropic":
        return str(headers["x-api-key"])
    return str(headers["authorization"]).split(" ", 1)[1]


# -- keys and headers ----------------------------------------------------------------------


@PROVIDERS
@pytest.mark.parametrize("padded", [KEY + "\n", f"  {KEY}\r\n", f"\t{KEY} "])
@responses.activate
def test_key_with_surrounding_whitespace_is_stripped(provider: str, padded: str) -> None:
    responses.add(responses.POST, url_of(provider), json=ok_body(provider))
    client = CLIENTS[provider](padded, stream=False, max_retries=0)
    assert client.create(request())["content"] == [{"type": "text", "text": "hi"}]
    assert sent_key(provider, responses.calls[0].request.headers) == KEY


@PROVIDERS
@responses.activate
def test_env_key_with_newline_is_stripped(provider: str, monkeypatch: pytest.MonkeyPatch
                                          ) -> None:
    monkeypatch.setenv(ENV[provider][0], KEY + "\n")
    responses.add(responses.POST, url_of(provider), json=ok_body(provider))
    CLIENTS[provider](stream=False, max_retries=0).create(request())
    assert sent_key(provider, responses.calls[0].request.headers) == KEY


@PROVIDERS
@pytest.mark.parametrize("bad", [f"{KEY[:8]}\n{KEY[8:]}", f"{KEY}\x1bx", f"{KEY[:8]}\u201c{KEY}"])
def test_key_with_inner_control_characters_is_refused_without_showing_it(
        provider: str, bad: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="api_key") as info:
        CLIENTS[provider](bad)
    assert KEY[8:] not in str(info.value) and KEY[:8] not in str(info.value)
    monkeypatch.setenv(ENV[provider][0], bad)
    client = CLIENTS[provider](stream=False, max_retries=0)
    with pytest.raises(ValueError, match=ENV[provider][0]) as info:
        client.create(request())
    assert KEY[8:] not in str(info.value)


def test_auth_token_is_checked_like_the_key() -> None:
    with pytest.raises(ValueError, match="auth_token") as info:
        AnthropicClient(auth_token=f"{KEY[:8]}\r{KEY[8:]}")
    assert KEY[8:] not in str(info.value)


@PROVIDERS
def test_default_header_with_line_break_is_refused_naming_only_the_header(provider: str
                                                                        ) -> None:
    with pytest.raises(ValueError, match="x-secret") as info:
        CLIENTS[provider](KEY, default_headers={"x-secret": f"{KEY}\nInjected: 1"})
    assert KEY not in str(info.value)


@PROVIDERS
def test_bad_header_from_a_user_session_is_not_retried_nor_shown(
        provider: str, caplog: pytest.LogCaptureFixture) -> None:
    session = requests.Session()
    session.headers["x-team-token"] = f" {KEY}\n"  # requests quotes the value when refusing
    posts: List[int] = []
    original = session.post

    def counting_post(*args: Any, **kwargs: Any) -> Any:
        posts.append(1)
        return original(*args, **kwargs)

    session.post = counting_post  # type: ignore[method-assign]
    client = CLIENTS[provider](KEY, base_url="http://127.0.0.1:9", session=session,
                               max_retries=3)
    with caplog.at_level(logging.DEBUG, logger="lattice"):
        with pytest.raises(ValueError, match="x-team-token") as info:
            client.create(request())
    assert len(posts) == 1  # not retried as if the connection had failed
    assert KEY not in str(info.value) and KEY not in repr(info.value)
    # requests' own error quotes the value: not chained (SPEC 21b), only its type named
    assert info.value.__cause__ is None and info.value.__context__ is None
    assert "(InvalidHeader)" in str(info.value)
    assert KEY not in caplog.text and "retry" not in caplog.text


@PROVIDERS
@responses.activate
def test_request_id_header_is_redacted_and_cleaned(provider: str) -> None:
    header = "request-id" if provider == "anthropic" else "x-request-id"
    responses.add(responses.POST, url_of(provider), status=401,
                  json={"error": {"type": "authentication_error", "message": "bad key"}},
                  headers={header: f"req_{KEY}\x07" + "z" * 500})
    with pytest.raises(AuthenticationError) as info:
        CLIENTS[provider](KEY, stream=False, max_retries=0).create(request())
    rid = info.value.request_id
    assert rid is not None and rid.startswith("req_***")
    assert KEY not in str(info.value) and "\x07" not in rid and len(rid) <= 200


@PROVIDERS
@responses.activate
def test_header_value_echoed_in_an_error_body_is_redacted(provider: str) -> None:
    responses.add(responses.POST, url_of(provider), status=400,
                  json={"error": {"type": "invalid_request_error",
                                  "message": f"bad header value {KEY}!"}})
    client = CLIENTS[provider]("k" * 12, stream=False, max_retries=0,
                               default_headers={"x-api-token": KEY})
    with pytest.raises(Exception) as info:
        client.create(request())
    assert KEY not in str(info.value) and KEY not in json.dumps(info.value.body)  # type: ignore


# -- readable errors ---------------------------------------------------------------------


def test_base_url_ending_in_v1_gets_a_hint_on_404() -> None:
    with MockMessagesServer() as server:
        client = AnthropicClient(KEY, base_url=server.base_url + "/v1", max_retries=0)
        with pytest.raises(NotFoundError, match="drop the /v1"):
            client.create(request())


@responses.activate
def test_chat_404_names_the_url_posted_to() -> None:
    responses.add(responses.POST, "http://localhost:8000/chat/completions", status=404,
                  body="Not Found")
    client = OpenAIChatClient(KEY, base_url="http://localhost:8000", stream=False,
                              max_retries=0)
    with pytest.raises(NotFoundError, match=r"/v1"):
        client.create(request())


def _closed_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = int(sock.getsockname()[1])
    sock.close()
    return port


@PROVIDERS
def test_connection_error_is_readable_and_names_its_cause(provider: str) -> None:
    client = CLIENTS[provider](KEY, base_url=f"http://127.0.0.1:{_closed_port()}",
                               max_retries=0)
    with pytest.raises(APIConnectionError) as info:
        client.create(request())
    text = str(info.value)
    assert "refused" in text.lower() and "127.0.0.1" in text
    for internal in ("HTTPConnectionPool", "Max retries", "object at 0x", "urllib3"):
        assert internal not in text
    # SPEC 21b: the cause names the URL whole (query secrets too): not chained, named
    assert info.value.__cause__ is None and info.value.__context__ is None
    assert "ConnectionError: " in text


@PROVIDERS
def test_debug_log_says_what_is_sent_without_the_key(
        provider: str, caplog: pytest.LogCaptureFixture) -> None:
    with MockMessagesServer() as server:
        base_url = server.base_url
        client = CLIENTS[provider](KEY, base_url=base_url)
        with caplog.at_level(logging.DEBUG, logger="lattice"):
            client.create(request(model="the-model-name"))
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert any("POST " + base_url in line and "the-model-name" in line
               and "bytes" in line for line in lines), lines
    assert KEY not in caplog.text


@PROVIDERS
def test_missing_requests_is_a_clear_error_at_construction(provider: str) -> None:
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import lattice\n"
        f"try:\n    lattice.{CLIENTS[provider].__name__}('{KEY}')\n"
        "except ImportError as exc:\n    print('ImportError:', exc)\n"
    )
    # -S: no site-packages, so requests cannot be found (as in a bare vendored copy)
    out = subprocess.run([sys.executable, "-S", "-c", code, str(ROOT)], capture_output=True,
                         text=True, env={k: v for k, v in os.environ.items()
                                         if k != "PYTHONPATH"}, check=True).stdout
    assert "ImportError:" in out and "pip install requests" in out, out


@PROVIDERS
@pytest.mark.parametrize("stream", [False, True])
@responses.activate
def test_json_nested_too_deep_is_a_clear_connection_error(provider: str, stream: bool) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    if stream:
        body, ctype = f"data: {deep}\n\n", "text/event-stream"
    else:
        body, ctype = deep, "application/json"
    responses.add(responses.POST, url_of(provider), body=body, content_type=ctype)
    client = CLIENTS[provider](KEY, stream=stream, max_retries=0)
    with pytest.raises(APIConnectionError):
        client.create(request())


@PROVIDERS
@responses.activate
def test_error_body_nested_too_deep_still_maps_by_status(provider: str) -> None:
    responses.add(responses.POST, url_of(provider), status=404, body="[" * 100_000)
    with pytest.raises(NotFoundError):
        CLIENTS[provider](KEY, stream=False, max_retries=0).create(request())


def test_one_huge_sse_line_is_split_in_linear_time() -> None:
    data = b"data: " + b"x" * (16 << 20) + b"\n\n"
    chunks = [data[i : i + 4096] for i in range(0, len(data), 4096)]
    started = time.process_time()
    lines = list(iter_lines(chunks))
    spent = time.process_time() - started
    assert [len(line) for line in lines] == [len(data) - 2, 0]
    assert spent < 3.0, spent  # quadratic joining took ~10 s here; linear takes ~0.02 s


def test_importing_the_chat_client_does_not_import_requests() -> None:
    code = ("import sys, lattice, lattice.models.openai, lattice.models.chat_stream, "
            "lattice.models.http, lattice.testing._mock_chat; "
            "lattice.OpenAIChatClient('sk-0123456789'); "
            "assert 'requests' not in sys.modules and 'urllib3' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
