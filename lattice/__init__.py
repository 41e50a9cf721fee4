"""lattice: a synchronous agent loop for Anthropic-compatible Messages APIs."""
from ._version import __version__
from .errors import *  # noqa: F401,F403 - provisional, replaced by the full surface
