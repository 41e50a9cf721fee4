"""The command line's cloud providers (``--provider bedrock|vertex|gemini|vertex-gemini``):
which credentials each needs, its default model, and its client.

``bedrock``: credentials and region as ``AnthropicBedrockClient`` finds them
(``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN``, ``AWS_PROFILE`` and
the shared files; ``AWS_REGION``/``AWS_DEFAULT_REGION``). ``vertex``:
``ANTHROPIC_VERTEX_PROJECT_ID`` and ``CLOUD_ML_REGION``, tokens from Google
application-default credentials (``google-auth``, the ``vertex`` extra). With ``--mock``
both talk to the bundled mock with its credentials (SigV4 is still computed and checked).
``gemini``: ``GEMINI_API_KEY`` (or ``GOOGLE_API_KEY``). ``vertex-gemini``:
``GOOGLE_CLOUD_PROJECT`` (``GOOGLE_CLOUD_LOCATION``, default ``global``) and
application-default credentials, as ``vertex``.
"""

from __future__ import annotations

import os
from typing import Any, Optional

from ..errors import AuthenticationError

__all__ = ["PROVIDERS", "REAL_KEY", "DEFAULT_MODELS", "missing_credentials", "make_client"]

PROVIDERS = ("bedrock", "vertex", "gemini", "vertex-gemini")
REAL_KEY = {"bedrock": "your AWS credentials and AWS_REGION",
            "vertex": "ANTHROPIC_VERTEX_PROJECT_ID and CLOUD_ML_REGION",
            "gemini": "GEMINI_API_KEY", "vertex-gemini": "GOOGLE_CLOUD_PROJECT"}
DEFAULT_MODELS = {"bedrock": "anthropic.claude-sonnet-4-5-20250929-v1:0",
                  "vertex": "claude-sonnet-4-5@20250929", "gemini": "gemini-2.5-flash",
                  "vertex-gemini": "gemini-2.5-flash"}
MOCK_VERTEX_TOKEN = "mock-vertex-access-token"

NO_BEDROCK = """\
lattice: --provider bedrock needs AWS credentials and a region ({problem}). Set:

    export AWS_ACCESS_KEY_ID=AKIA...
    export AWS_SECRET_ACCESS_KEY=...
    export AWS_SESSION_TOKEN=...      # with temporary credentials
    export AWS_REGION=us-east-1

or AWS_PROFILE naming a profile of ~/.aws/credentials. To try lattice offline, add --mock.
"""

NO_VERTEX = """\
lattice: --provider vertex needs {problem}. Set:

    export ANTHROPIC_VERTEX_PROJECT_ID=my-project
    export CLOUD_ML_REGION=us-east5     # or global

and install google-auth for application-default credentials:

    pip install 'agent-lattice[vertex]' && gcloud auth application-default login

To try lattice offline, add --mock.
"""


NO_GEMINI = """\
lattice: --provider gemini needs an API key. Set:

    export GEMINI_API_KEY=...      # from https://aistudio.google.com/apikey

To try lattice offline, add --mock.
"""

NO_VERTEX_GEMINI = """\
lattice: --provider vertex-gemini needs {problem}. Set:

    export GOOGLE_CLOUD_PROJECT=my-project
    export GOOGLE_CLOUD_LOCATION=us-central1     # default: global

and install google-auth for application-default credentials:

    pip install 'agent-lattice[vertex]' && gcloud auth application-default login

To try lattice offline, add --mock.
"""


def missing_credentials(provider: str) -> Optional[str]:
    """What to tell a user whose environment lacks the provider's credentials (None: ok)."""
    if provider in ("gemini", "vertex-gemini"):
        return _missing_gemini(provider)
    if provider == "bedrock":
        from ..models.aws_config import resolve_credentials, resolve_region

        try:
            resolve_credentials(None, None)
        except AuthenticationError:
            return NO_BEDROCK.format(problem="none found")
        except ValueError as exc:  # an unreadable shared file
            return NO_BEDROCK.format(problem=exc)
        if resolve_region(None, None) is None:
            return NO_BEDROCK.format(problem="no region")
        return None
    from ..models.vertex import _has_google_auth

    missing = [name for name in ("ANTHROPIC_VERTEX_PROJECT_ID", "CLOUD_ML_REGION")
               if not os.environ.get(name, "").strip()]
    if not _has_google_auth():
        missing.append("google-auth")
    return NO_VERTEX.format(problem=", ".join(missing)) if missing else None


def _missing_gemini(provider: str) -> Optional[str]:
    from ..models.vertex import _has_google_auth

    if provider == "gemini":
        found = any(os.environ.get(n, "").strip() for n in ("GEMINI_API_KEY", "GOOGLE_API_KEY"))
        return None if found else NO_GEMINI
    missing = [] if os.environ.get("GOOGLE_CLOUD_PROJECT", "").strip() else [
        "GOOGLE_CLOUD_PROJECT"]
    if not _has_google_auth():
        missing.append("google-auth")
    return NO_VERTEX_GEMINI.format(problem=", ".join(missing)) if missing else None


def _gemini_client(provider: str, base_url: Optional[str], mock: bool) -> Any:
    from ..models.gemini import GeminiClient, VertexGeminiClient

    if provider == "gemini":
        return GeminiClient(base_url=base_url, api_key="offline-mock-key" if mock else None)
    if not mock:
        return VertexGeminiClient(base_url=base_url)
    return VertexGeminiClient(base_url=base_url, access_token=MOCK_VERTEX_TOKEN,
                              project_id=os.environ.get("GOOGLE_CLOUD_PROJECT")
                              or "mock-project")


def make_client(provider: str, *, base_url: Optional[str], mock: bool) -> Any:
    """The provider's client; ValueError for a bad option (the CLI reports it)."""
    if provider in ("gemini", "vertex-gemini"):
        return _gemini_client(provider, base_url, mock)
    if provider == "bedrock":
        from ..models.bedrock import AnthropicBedrockClient

        if not mock:
            return AnthropicBedrockClient(base_url=base_url)
        from ..testing._mock_bedrock import DEFAULT_BEDROCK_CREDENTIALS

        key_id, secret = DEFAULT_BEDROCK_CREDENTIALS
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        return AnthropicBedrockClient(base_url=base_url, access_key_id=key_id,
                                      secret_access_key=secret, region=region or "us-east-1")
    from ..models.vertex import AnthropicVertexClient

    if not mock:
        return AnthropicVertexClient(base_url=base_url)
    return AnthropicVertexClient(base_url=base_url, access_token=MOCK_VERTEX_TOKEN,
                                 project_id=os.environ.get("ANTHROPIC_VERTEX_PROJECT_ID")
                                 or "mock-project",
                                 region=os.environ.get("CLOUD_ML_REGION") or "us-east5")
