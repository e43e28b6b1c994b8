"""The Litestar OpenAI-compatible API: thin controllers over the engine manager's bundles."""

from server.api.app import create_app
from server.api.settings import ApiSettings

__all__ = ["ApiSettings", "create_app"]
