"""The requests the official ``anthropic`` SDK (2.17) makes to Bedrock and Vertex, made
here by hand, against the mock (SPEC 21b). The SDK itself needs Python 3.10, httpx2,
boto3 and google-auth: too heavy for the test extra, so its requests are rebuilt from
what it sends: a dated ``anthropic_version`` (``2026-10-21``) in the body, the model in
the path with ``:`` left as is, every header but ``connection`` signed by botocore's own
SigV4 (service ``bedrock``), betas in the body as ``anthropic_beta``; on Vertex the
``stream`` flag kept in the body and a bearer token."""

from __future__ import annotations

import base64
import json
from typing import Any, Dict

import pytest
import requests

from lattice.testing import MockMessagesServer

auth = pytest.importorskip("botocore.auth", reason="needs botocore (test extra)")
awsrequest = pytest.importorskip("botocore.awsrequest")
credentials = pytest.importorskip("botocore.credentials")
eventstream = pytest.importorskip("botocore.eventstream")

SDK_VERSION = "2026-10-21"  # anthropic 2.17's ANTHROPIC_API_VERSION
MODEL = "anthropic.claude-sonnet-4-5-20250929-v1:0"
SDK_HEADERS = {"accept": "application/json", "content-type": "application/json",
               "user-agent": "Anthropic/Python 2.17.0", "x-stainless-lang": "python",
               "x-stainless-package-version": "2.17.0", "anthropic-version": SDK_VERSION,
               "connection": "keep-alive"}


def bedrock_post(server: MockMessagesServer, body: Dict[str, Any], stream: bool
                 ) -> requests.Response:
    url = (f"{server.base_url}/model/{MODEL}/"
           f"{'invoke-with-response-stream' if stream else 'invoke'}")
    data = json.dumps(body).encode()
    signed = {k: v for k, v in SDK_HEADERS.items() if k != "connection"}
    request = awsrequest.AWSRequest(method="POST", url=url, headers=signed, data=data)
    keys = credentials.Credentials(*server.bedrock_credentials)
    auth.SigV4Auth(keys, "bedrock", "us-east-1").add_auth(request)
    headers = dict(request.headers.items())
    headers["connection"] = "keep-alive"
    return requests.post(url, data=data, headers=headers, timeout=10)


BODY = {"anthropic_version": SDK_VERSION, "max_tokens": 64,
        "anthropic_beta": ["interleaved-thinking-2025-05-14"],
        "messages": [{"role": "user", "content": "hi"}]}


def test_the_sdks_bedrock_invoke_is_answered() -> None:
    with MockMessagesServer(["fine"]) as server:
        response = bedrock_post(server, BODY, stream=False)
        assert response.status_code == 200, response.text
        assert response.json()["content"][0]["text"] == "fine"
        assert response.json()["model"] == MODEL


def test_the_sdks_bedrock_stream_is_answered_in_frames() -> None:
    with MockMessagesServer(["fine"]) as server:
        response = bedrock_post(server, BODY, stream=True)
        assert response.status_code == 200, response.text
        buffer = eventstream.EventStreamBuffer()
        buffer.add_data(response.content)
        events = [json.loads(base64.b64decode(json.loads(m.payload)["bytes"]))
                  for m in buffer]
        assert events[0]["type"] == "message_start" and events[-1]["type"] == "message_stop"


def test_the_sdks_bedrock_request_signed_for_another_service_is_refused() -> None:
    with MockMessagesServer(["fine"]) as server:
        url = f"{server.base_url}/model/{MODEL}/invoke"
        data = json.dumps(BODY).encode()
        request = awsrequest.AWSRequest(method="POST", url=url, data=data,
                                        headers={"content-type": "application/json"})
        keys = credentials.Credentials(*server.bedrock_credentials)
        auth.SigV4Auth(keys, "s3", "us-east-1").add_auth(request)
        response = requests.post(url, data=data, headers=dict(request.headers.items()),
                                 timeout=10)
        assert response.status_code == 403
        assert "scoped to correct service" in response.json()["message"]


@pytest.mark.parametrize("stream", [False, True])
def test_the_sdks_vertex_request_is_answered(stream: bool) -> None:
    specifier = "streamRawPredict" if stream else "rawPredict"
    path = (f"/v1/projects/p/locations/us-east5/publishers/anthropic/models/"
            f"claude-sonnet-4-5@20250929:{specifier}")
    body = {"anthropic_version": SDK_VERSION, "max_tokens": 64, "stream": stream,
            "messages": [{"role": "user", "content": "hi"}]}
    with MockMessagesServer(["fine"], vertex_token="ya29.token") as server:
        headers = {k: v for k, v in SDK_HEADERS.items() if k != "connection"}
        headers["authorization"] = "Bearer ya29.token"
        response = requests.post(server.base_url + path, json=body, headers=headers,
                                 timeout=10)
        assert response.status_code == 200, response.text
        if stream:
            events = [json.loads(line[6:]) for line in response.text.splitlines()
                      if line.startswith("data: ")]
            text = "".join(e["delta"].get("text", "") for e in events
                           if e["type"] == "content_block_delta")
            assert events[-1]["type"] == "message_stop" and text == "fine"
        else:
            assert response.json()["content"][0]["text"] == "fine"
