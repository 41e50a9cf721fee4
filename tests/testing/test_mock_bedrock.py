"""MockMessagesServer's Bedrock and Vertex routes are as strict as the services: a request
signed over another body, an old date, no signature, a body Bedrock refuses, a missing or
wrong bearer token; and the stream is frames botocore's decoder reads."""

from __future__ import annotations

import base64
import datetime
import json
from typing import Any, Dict, Optional

import pytest
import requests

from lattice.models.sigv4 import Credentials, sign_headers
from lattice.testing import MockMessagesServer

eventstream = pytest.importorskip("botocore.eventstream")

MOCK = Credentials("mock-access-key-id", "mock-secret-access-key")
PATH = "/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke"
BODY: Dict[str, Any] = {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 10,
                        "messages": [{"role": "user", "content": "hi"}]}


def post(server: MockMessagesServer, body: Dict[str, Any], *, path: str = PATH,
         signed_body: Optional[bytes] = None, now: Optional[datetime.datetime] = None,
         credentials: Credentials = MOCK, sign: bool = True) -> requests.Response:
    data = json.dumps(body).encode()
    url = server.base_url + path
    headers = {"content-type": "application/json"}
    if sign:
        headers.update(sign_headers("POST", url, headers, data if signed_body is None
                                    else signed_body, credentials=credentials,
                                    region="us-east-1", service="bedrock", now=now))
    return requests.post(url, data=data, headers=headers, timeout=10)


def error_type(response: requests.Response) -> str:
    return response.headers["x-amzn-ErrorType"].split(":")[0]


def test_a_good_request_is_answered_with_a_request_id() -> None:
    with MockMessagesServer(["fine"]) as server:
        response = post(server, BODY)
        assert response.status_code == 200 and response.json()["content"][0]["text"] == "fine"
        assert response.headers["x-amzn-RequestId"]
        assert response.json()["model"] == "anthropic.claude-sonnet-4-5-20250929-v1:0"


@pytest.mark.parametrize("how, status, name, words", [
    ("other body", 403, "InvalidSignatureException", "signature we calculated"),
    ("old date", 403, "InvalidSignatureException", "Signature expired"),
    ("unsigned", 403, "MissingAuthenticationTokenException", "Missing Authentication"),
    ("other key id", 403, "UnrecognizedClientException", "security token"),
    ("other secret", 403, "InvalidSignatureException", "signature we calculated"),
])
def test_signature_problems_get_bedrocks_403(how: str, status: int, name: str,
                                             words: str) -> None:
    options: Dict[str, Any] = {
        "other body": {"signed_body": b"{}"},
        "old date": {"now": datetime.datetime.now(datetime.timezone.utc)
                     - datetime.timedelta(minutes=10)},
        "unsigned": {"sign": False},
        "other key id": {"credentials": Credentials("AKIAOTHER", MOCK.secret_access_key)},
        "other secret": {"credentials": Credentials(MOCK.access_key_id, "not-the-secret")},
    }[how]
    with MockMessagesServer(["unused"]) as server:
        response = post(server, BODY, **options)
        assert response.status_code == status and error_type(response) == name
        assert words in response.json()["message"]
        assert server.requests == []  # refused before the script


@pytest.mark.parametrize("body, words", [
    (dict(BODY, model="anthropic.claude"), "extraneous key [model]"),
    (dict(BODY, stream=True), "extraneous key [stream]"),
    ({k: v for k, v in BODY.items() if k != "anthropic_version"}, "anthropic_version"),
    (dict(BODY, messages=[]), "at least one message"),
])
def test_bodies_bedrock_refuses(body: Dict[str, Any], words: str) -> None:
    with MockMessagesServer(["unused"]) as server:
        response = post(server, body)
        assert response.status_code == 400 and error_type(response) == "ValidationException"
        assert words in response.json()["message"]


def test_unknown_cloud_routes_are_404() -> None:
    with MockMessagesServer() as server:
        response = post(server, BODY, path="/model/m/converse")
        assert response.status_code == 404


def test_the_stream_is_frames_botocore_reads() -> None:
    with MockMessagesServer([{"content": [{"type": "tool_use", "name": "f",
                                           "input": {"a": 1}}]}]) as server:
        response = post(server, BODY, path=PATH.replace("/invoke", "/invoke-with-response-"
                                                                     "stream"))
        assert response.headers["content-type"] == "application/vnd.amazon.eventstream"
        buffer = eventstream.EventStreamBuffer()
        buffer.add_data(response.content)
        events = []
        for message in buffer:
            assert message.headers[":message-type"] == "event"
            assert message.headers[":event-type"] == "chunk"
            events.append(json.loads(base64.b64decode(json.loads(message.payload)["bytes"])))
        assert events[0]["type"] == "message_start" and events[-1]["type"] == "message_stop"
        assert "amazon-bedrock-invocationMetrics" in events[-1]


VERTEX = "/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-x@1:rawPredict"
VERTEX_BODY = {"anthropic_version": "vertex-2023-10-16", "max_tokens": 10,
               "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize("authorization, status", [
    (None, 401), ("Bearer ", 401), ("Basic abc", 401), ("Bearer wrong", 401),
    ("Bearer right-token", 200)])
def test_vertex_checks_the_bearer_token(authorization: Optional[str], status: int) -> None:
    with MockMessagesServer(["ok"], vertex_token="right-token") as server:
        headers = {} if authorization is None else {"authorization": authorization}
        response = requests.post(server.base_url + VERTEX, json=VERTEX_BODY, headers=headers,
                                 timeout=10)
        assert response.status_code == status
        if status == 401:
            assert response.json()["error"]["status"] == "UNAUTHENTICATED"


def test_vertex_refuses_a_model_in_the_body() -> None:
    with MockMessagesServer() as server:
        response = requests.post(server.base_url + VERTEX, json=dict(VERTEX_BODY, model="x"),
                                 headers={"authorization": "Bearer t"}, timeout=10)
        assert response.status_code == 400 and "model" in response.json()["error"]["message"]
