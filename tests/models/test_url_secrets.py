"""Secrets in configured URLs and headers (SPEC 16a), against a real local server that
echoes the request it got: a ``base_url`` password (sent by ``requests`` as Basic auth),
query values of ``base_url``/``default_query``, and every ``default_headers`` value of 8+
characters stay out of errors, lattice's and urllib3's log lines and reprs (as ``***``);
a ``base_url`` with a query keeps it after the path."""

from __future__ import annotations

import base64
import logging
from typing import Any, List, Optional

import pytest
from endless_server import EndlessServer, http_response

from lattice import AnthropicClient, OpenAIChatClient
from lattice.errors import BadRequestError
from lattice.models.base import ModelRequest
from lattice.models.urls import endpoint, shown_url

KEY = "sk-urls-0123456789"
PASSWORD = "pa55-w0rd-SECRET"
QUERY = "qv-0123456789-SECRET"
HEADER = "team-SECRET-42"
OK = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
      "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn",
      "usage": {"input_tokens": 1, "output_tokens": 1}}


def request() -> ModelRequest:
    return ModelRequest(model="m", messages=[{"role": "user", "content": "hi"}])


def _echo(raw: bytes) -> Optional[bytes]:
    head = raw.partition(b"\r\n\r\n")[0]
    return http_response({"error": {"type": "invalid_request_error",
                                    "message": "you sent " + head.decode()}},
                         "400 Bad Request")


CHAT = {"id": "c1", "model": "m", "choices": [
    {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]}


def _ok(raw: bytes) -> Optional[bytes]:
    return http_response(CHAT if b"/chat/completions" in raw.split(b"\r\n", 1)[0] else OK)


def _secret_url(server: EndlessServer, path: str = "") -> str:
    return (server.url.replace("http://", f"http://user:{PASSWORD}@") + path
            + f"?token={QUERY}")


@pytest.mark.parametrize("cls", [AnthropicClient, OpenAIChatClient])
def test_echoed_credentials_are_redacted_from_errors_logs_and_reprs(
        cls: Any, caplog: pytest.LogCaptureFixture) -> None:
    basic = base64.b64encode(f"user:{PASSWORD}".encode()).decode()
    with EndlessServer("json", _echo) as server:
        client = cls(KEY, base_url=_secret_url(server), stream=False, max_retries=0,
                     default_headers={"X-Team": HEADER})
        with caplog.at_level(logging.DEBUG):
            with pytest.raises(BadRequestError) as info:
                client.create(request())
        sent = server.requests[0].decode()
    assert basic in sent and QUERY in sent and HEADER in sent  # the server did see them
    shown = [str(info.value), repr(info.value.body), caplog.text, repr(client)]
    for text in shown:
        for secret in (PASSWORD, basic, QUERY, HEADER, KEY):
            assert secret not in text, (secret, text)
    assert "***" in str(info.value)
    assert any(f"user:***@127.0.0.1:{server.port}" in r.getMessage() and "token=***" in
               r.getMessage() for r in caplog.records if r.name == "lattice"), caplog.text


def test_query_values_stay_out_of_urllib3_debug_lines(caplog: pytest.LogCaptureFixture
                                                      ) -> None:
    with EndlessServer("json", _ok) as server:
        client = OpenAIChatClient(KEY, base_url=server.url + f"/v1?token={QUERY}",
                                  stream=False, default_query={"api-key": "ak-SECRET-777"})
        with caplog.at_level(logging.DEBUG, logger="urllib3"):
            client.create(request())
    lines: List[str] = [r.getMessage() for r in caplog.records
                        if r.name.startswith("urllib3")]
    assert any("/v1/chat/completions?token=***&api-key=***" in line for line in lines), lines
    assert QUERY not in caplog.text and "ak-SECRET-777" not in caplog.text


@pytest.mark.parametrize("cls,path", [(AnthropicClient, "/v1/messages"),
                                      (OpenAIChatClient, "/chat/completions")])
def test_a_base_url_query_keeps_its_place_after_the_path(cls: Any, path: str) -> None:
    with EndlessServer("json", _ok) as server:
        cls(KEY, base_url=server.url + "/api/?tenant=t1", stream=False).create(request())
        line = server.requests[0].split(b"\r\n", 1)[0].decode()
    assert line == f"POST /api{path}?tenant=t1 HTTP/1.1"


def test_url_helpers() -> None:
    assert endpoint("https://h/v1?a=1", "/chat", {"b": "2"}) == "https://h/v1/chat?a=1&b=2"
    assert endpoint("https://h", "/v1/messages") == "https://h/v1/messages"
    assert shown_url("https://u:p@h:8/x?k=v&flag") == "https://u:***@h:8/x?k=***&flag"
    assert shown_url("https://h/x") == "https://h/x"
    from lattice.models.responses import responses_url

    assert responses_url("http://h/api?t=1") == "http://h/api/v1/responses?t=1"
    assert responses_url("http://h/v1") == "http://h/v1/responses"
