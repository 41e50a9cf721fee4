"""The command line's OpenAI Responses and Azure OpenAI providers (``--provider
openai-responses|azure``): which credentials each needs, and its client.

``openai-responses``: ``OPENAI_API_KEY`` (not needed with ``--base-url`` or
``OPENAI_BASE_URL``: a local server). ``azure``: the endpoint from ``--base-url`` or
``AZURE_OPENAI_ENDPOINT``, the key from ``AZURE_OPENAI_API_KEY``, the deployment from
``AZURE_OPENAI_DEPLOYMENT`` (else the model name) and the API version from
``OPENAI_API_VERSION`` (else ``DEFAULT_API_VERSION``).
"""

from __future__ import annotations

import os
from typing import Any, Optional

__all__ = ["PROVIDERS", "REAL_KEY", "DEFAULT_API_VERSION", "missing_credentials",
           "make_client"]

PROVIDERS = ("openai-responses", "azure")
REAL_KEY = {"openai-responses": "OPENAI_API_KEY", "azure": "AZURE_OPENAI_API_KEY"}
DEFAULT_API_VERSION = "2024-10-21"

NO_AZURE = """\
lattice: --provider azure needs an endpoint and a key. Set:

    export AZURE_OPENAI_ENDPOINT=https://<resource>.openai.azure.com
    export AZURE_OPENAI_API_KEY=...
    export AZURE_OPENAI_DEPLOYMENT=<deployment>   # else --model is the deployment
    export OPENAI_API_VERSION=2024-10-21          # optional

To try lattice offline, add --mock.
"""

NO_RESPONSES_KEY = """\
lattice: no API key for api.openai.com. Set OPENAI_API_KEY:

    export OPENAI_API_KEY=sk-...

To try lattice offline, add --mock.
"""


def missing_credentials(provider: str, base_url: Optional[str]) -> Optional[str]:
    """What to tell a user whose environment lacks the provider's credentials (None: ok)."""
    env = os.environ
    if provider == "azure":
        if not (base_url or env.get("AZURE_OPENAI_ENDPOINT")) or not env.get(
                "AZURE_OPENAI_API_KEY"):
            return NO_AZURE
        return None
    if not (base_url or env.get("OPENAI_BASE_URL") or env.get("OPENAI_API_KEY")):
        return NO_RESPONSES_KEY
    return None


def make_client(provider: str, *, model: str, api_key: Optional[str],
                base_url: Optional[str]) -> Any:
    """The provider's client; ValueError for a bad option (the CLI reports it)."""
    if provider == "azure":
        from ..models.azure import AzureOpenAIChatClient

        return AzureOpenAIChatClient(
            endpoint=base_url, api_key=api_key,
            deployment=os.environ.get("AZURE_OPENAI_DEPLOYMENT") or model,
            api_version=os.environ.get("OPENAI_API_VERSION") or DEFAULT_API_VERSION)
    from ..models.responses import OpenAIResponsesClient

    return OpenAIResponsesClient(api_key=api_key, base_url=base_url)
