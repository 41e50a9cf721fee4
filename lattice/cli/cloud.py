"""The command line's AWS Bedrock and Google Vertex AI providers (``--provider
bedrock|vertex``): which credentials each needs, its default model, and its client.

``bedrock``: credentials and region as ``AnthropicBedrockClient`` finds them
(``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN``, ``AWS_PROFILE`` and
the shared files; ``AWS_REGION``/``AWS_DEFAULT_REGION``). ``vertex``:
``ANTHROPIC_VERTEX_PROJECT_ID`` and ``CLOUD_ML_REGION``, tokens from Google
application-default credentials (``google-auth``, the ``vertex`` extra). With ``--mock``
both talk to the bundled mock with its credentials (SigV4 is still computed and checked).
"""

from __future__ import annotations

import os
from typing import Any, Optional

from ..errors import AuthenticationError

__all__ = ["PROVIDERS", "REAL_KEY", "DEFAULT_MODELS", "missing_credentials", "make_client"]

PROVIDERS = ("bedrock", "vertex")
REAL_KEY = {"bedrock": "your AWS credentials and AWS_REGION",
            "vertex": "ANTHROPIC_VERTEX_PROJECT_ID and CLOUD_ML_REGION"}
DEFAULT_MODELS = {"bedrock": "anthropic.claude-sonnet-4-5-20250929-v1:0",
                  "vertex": "claude-sonnet-4-5@20250929"}
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


def missing_credentials(provider: str) -> Optional[str]:
    """What to tell a user whose environment lacks the provider's credentials (None: ok)."""
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


def make_client(provider: str, *, base_url: Optional[str], mock: bool) -> Any:
    """The provider's client; ValueError for a bad option (the CLI reports it)."""
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
