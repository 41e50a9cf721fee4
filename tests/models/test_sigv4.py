"""AWS Signature Version 4 (lattice/models/sigv4.py): equal to botocore's signer (a
test-only oracle) over a table of requests, and to AWS's published test-suite vectors."""

from __future__ import annotations

import datetime
from typing import Dict, List, Tuple

import pytest

from lattice.models.sigv4 import (
    Credentials,
    canonical_request,
    host_of,
    sign_headers,
    signing_key,
)

botocore_auth = pytest.importorskip("botocore.auth")
from botocore.awsrequest import AWSRequest  # noqa: E402
from botocore.credentials import Credentials as BotoCredentials  # noqa: E402

KEY = Credentials("AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
TOKEN = Credentials(KEY.access_key_id, KEY.secret_access_key,
                    "IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJHMEUCIQD+session/token==")
BEDROCK = "https://bedrock-runtime.us-east-1.amazonaws.com"
JSON = {"content-type": "application/json", "accept": "application/json"}
BODY = b'{"anthropic_version":"bedrock-2023-05-31","max_tokens":16,"messages":[]}'
T0 = datetime.datetime(2026, 12, 1, 21, 30, 5)

# (method, url, headers, body, credentials, region, service, when)
Case = Tuple[str, str, Dict[str, str], bytes, Credentials, str, str, datetime.datetime]
CASES: List[Case] = [
    ("POST", f"{BEDROCK}/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke", JSON, BODY,
     KEY, "us-east-1", "bedrock", T0),
    ("POST", f"{BEDROCK}/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/"
     "invoke-with-response-stream", {**JSON, "accept": "application/vnd.amazon.eventstream"},
     BODY, KEY, "us-east-1", "bedrock", T0),
    ("POST", f"{BEDROCK}/model/anthropic.claude-3-haiku-20240307-v1:0/invoke", JSON, BODY, KEY,
     "us-east-1", "bedrock", T0),
    ("POST", f"{BEDROCK}/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3A"
     "inference-profile%2Fus.anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke", JSON, BODY,
     KEY, "us-east-1", "bedrock", T0),
    ("POST", f"{BEDROCK}/model/arn%3Aaws%3Abedrock%3Aus-west-2%3A123456789012%3A"
     "application-inference-profile%2Fabc123xyz/invoke-with-response-stream", JSON, BODY,
     TOKEN, "us-west-2", "bedrock", T0),
    ("POST", "https://bedrock-runtime.eu-west-3.amazonaws.com/model/"
     "eu.anthropic.claude-3-7-sonnet-20250219-v1%3A0/invoke", JSON, BODY, TOKEN, "eu-west-3",
     "bedrock", datetime.datetime(2024, 2, 29, 0, 0, 0)),
    ("POST", "https://bedrock-runtime.ap-northeast-1.amazonaws.com/model/m/invoke", JSON,
     BODY, KEY, "ap-northeast-1", "bedrock", datetime.datetime(2023, 12, 31, 23, 59, 59)),
    ("POST", "https://bedrock-runtime.us-gov-west-1.amazonaws.com/model/m%3A1/invoke", JSON,
     b"", KEY, "us-gov-west-1", "bedrock", datetime.datetime(2030, 1, 1, 12, 0, 0)),
    ("GET", "https://example.amazonaws.com/a%20space/b%2Bplus/~tilde", {}, b"", KEY,
     "us-east-1", "service", T0),
    ("GET", "https://example.amazonaws.com/caf%C3%A9/%E2%9C%93", {}, b"", KEY, "eu-central-1",
     "service", T0),
    ("GET", "https://example.amazonaws.com/a/./b/../c/", {}, b"", KEY, "us-east-1", "service",
     T0),
    ("GET", "https://example.amazonaws.com//double//slash", {}, b"", KEY, "us-east-1",
     "service", T0),
    ("GET", "https://example.amazonaws.com/?b=2&a=1&a=0&empty=&flag", {}, b"", KEY,
     "us-east-1", "service", T0),
    ("GET", "https://example.amazonaws.com/list?key%20with%20space=v%2Fslash&tilde=~x&"
     "plus=%2B1&star=%2A", {}, b"", TOKEN, "sa-east-1", "service", T0),
    ("GET", "https://example.amazonaws.com/q?Param2=value2&Param1=value1&param1=lower", {},
     b"", KEY, "us-east-1", "execute-api", T0),
    ("POST", "https://example.amazonaws.com/", {"X-Custom": "  a   b  c ", "x-amz-meta": "1"},
     b"x" * 100000, KEY, "us-east-1", "service", T0),
    ("POST", "http://127.0.0.1:8080/model/anthropic.claude-v2%3A1/invoke", JSON, BODY, KEY,
     "us-east-1", "bedrock", T0),
    ("POST", "https://localhost:443/model/m/invoke", JSON, BODY, KEY, "us-east-1", "bedrock",
     T0),
    ("POST", "https://vpce-0abc-xyz.bedrock-runtime.us-east-1.vpce.amazonaws.com:8443/model/"
     "m/invoke", JSON, BODY, TOKEN, "us-east-1", "bedrock", T0),
    ("POST", f"{BEDROCK}/model/m/invoke", {**JSON, "user-agent": "agent-lattice/0.3",
                                           "x-amzn-trace-id": "Root=1-abc"}, BODY, KEY,
     "us-east-1", "bedrock", T0),
    ("POST", f"{BEDROCK}/model/m/invoke", {**JSON, "X-Amzn-Bedrock-Trace": "ENABLED",
                                           "X-Amzn-Bedrock-GuardrailIdentifier": "gr-1"},
     "{\"text\":\"h\u00e9llo \u2603\"}".encode("utf-8"), TOKEN, "ca-central-1", "bedrock",
     datetime.datetime(2026, 7, 4, 4, 5, 6)),
    ("PUT", "https://example.amazonaws.com/%21%27%28%29%2A", {"content-type": "text/plain"},
     b"put", KEY, "me-south-1", "service", T0),
]


def _botocore(case: Case, monkeypatch: pytest.MonkeyPatch) -> Dict[str, str]:
    method, url, headers, body, credentials, region, service, when = case
    monkeypatch.setattr(botocore_auth, "get_current_datetime", lambda *a, **k: when)
    request = AWSRequest(method=method, url=url, data=body, headers=dict(headers))
    botocore_auth.SigV4Auth(BotoCredentials(*credentials), service, region).add_auth(request)
    return {k.lower(): v for k, v in request.headers.items()}


def test_the_table_is_wide_enough() -> None:
    assert len(CASES) >= 20
    assert sum(1 for c in CASES if c[4].session_token) >= 4
    assert len({c[5] for c in CASES}) >= 8 and len({c[7] for c in CASES}) >= 5


@pytest.mark.parametrize("case", CASES, ids=[f"{i}-{c[0]}-{c[6]}" for i, c in enumerate(CASES)])
def test_signature_equals_botocores(case: Case, monkeypatch: pytest.MonkeyPatch) -> None:
    method, url, headers, body, credentials, region, service, when = case
    ours = sign_headers(method, url, headers, body, credentials=credentials, region=region,
                        service=service, now=when)
    theirs = _botocore(case, monkeypatch)
    assert ours["authorization"] == theirs["authorization"]
    assert ours["x-amz-date"] == theirs["x-amz-date"]
    assert ours.get("x-amz-security-token") == theirs.get("x-amz-security-token")


def test_a_retry_signs_again_with_the_new_time() -> None:
    url = f"{BEDROCK}/model/m/invoke"
    first = sign_headers("POST", url, JSON, BODY, credentials=KEY, region="us-east-1",
                         service="bedrock", now=T0)
    again = sign_headers("POST", url, {**JSON, **first}, BODY, credentials=KEY,
                         region="us-east-1", service="bedrock",
                         now=T0 + datetime.timedelta(seconds=1))
    assert again["authorization"] != first["authorization"]
    assert again["x-amz-date"] == "20261201T213006Z"
    aware = T0.replace(tzinfo=datetime.timezone.utc).astimezone(
        datetime.timezone(datetime.timedelta(hours=-5)))
    assert sign_headers("POST", url, JSON, BODY, credentials=KEY, region="us-east-1",
                        service="bedrock", now=aware) == first


def test_the_model_id_is_one_segment_encoded_once_more() -> None:
    canonical, signed = canonical_request(
        "POST", f"{BEDROCK}/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Ainference-profile%2F"
        "us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke", {"x-amz-date": "x"}, "h")
    assert canonical.split("\n")[1] == ("/model/arn%253Aaws%253Abedrock%253Aus-east-1%253A1"
                                        "%253Ainference-profile%252Fus.anthropic.claude-sonnet"
                                        "-4-5-20250929-v1%253A0/invoke")
    assert signed == "host;x-amz-date"


def test_host_is_what_the_http_client_sends() -> None:
    assert host_of("https://Bedrock-Runtime.us-east-1.amazonaws.com/x") == \
        "bedrock-runtime.us-east-1.amazonaws.com"
    assert host_of("http://127.0.0.1:8080/x") == "127.0.0.1:8080"
    assert host_of("https://h:443/x") == "h" and host_of("http://h:80") == "h"
    assert host_of("http://user:pw@[::1]:9000/") == "[::1]:9000"


def test_secrets_are_not_in_what_is_returned_or_shown() -> None:
    headers = sign_headers("POST", f"{BEDROCK}/model/m/invoke", JSON, BODY, credentials=TOKEN,
                           region="us-east-1", service="bedrock", now=T0)
    assert TOKEN.secret_access_key not in str(headers["authorization"])
    assert TOKEN.secret_access_key not in repr(TOKEN)
    assert str(TOKEN.session_token) not in repr(TOKEN)
    assert TOKEN.secret_access_key not in str(TOKEN) and "session_token=<set>" in repr(TOKEN)


# -- AWS's published Signature Version 4 test suite (aws-sig-v4-test-suite, 2015-08-30) --
SUITE = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
SUITE_TIME = datetime.datetime(2015, 8, 30, 12, 36, 0)
EXAMPLE = "https://example.amazonaws.com"
FORM_HASH = "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e"
VECTORS = [  # (name, method, url, headers, body, signed headers, signature)
    ("get-vanilla", "GET", f"{EXAMPLE}/", {}, b"", "host;x-amz-date",
     "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"),
    ("get-vanilla-query-order-key-case", "GET", f"{EXAMPLE}/?Param2=value2&Param1=value1",
     {}, b"", "host;x-amz-date",
     "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500"),
    ("get-utf8", "GET", f"{EXAMPLE}/\u1234", {}, b"", "host;x-amz-date",
     "8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85"),
    ("post-vanilla", "POST", f"{EXAMPLE}/", {}, b"", "host;x-amz-date",
     "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"),
    ("post-x-www-form-urlencoded", "POST", f"{EXAMPLE}/",
     {"content-type": "application/x-www-form-urlencoded", "content-length": "13",
      "x-amz-content-sha256": FORM_HASH}, b"Param1=value1",
     "content-length;content-type;host;x-amz-content-sha256;x-amz-date",
     "d3875051da38690788ef43de4db0d8f280229d82040bfac253562e56c3f20e0b"),
]


@pytest.mark.parametrize("vector", VECTORS, ids=[v[0] for v in VECTORS])
def test_published_aws_vectors(vector: Tuple[str, str, str, Dict[str, str], bytes, str, str]
                               ) -> None:
    _, method, url, headers, body, signed, signature = vector
    ours = sign_headers(method, url, headers, body, credentials=SUITE, region="us-east-1",
                        service="service", now=SUITE_TIME)
    assert ours["authorization"] == (
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
        f"SignedHeaders={signed}, Signature={signature}")


def test_published_derived_key_example() -> None:
    # AWS's "deriving the signing key" example (IAM, 2012-02-15)
    assert signing_key(SUITE.secret_access_key, "20120215", "us-east-1", "iam").hex() == (
        "f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a000a1a9e090d414db404d")


