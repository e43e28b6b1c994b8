"""The Litestar OpenAI-compatible API: thin controllers over the engine manager's bundles.

It sits above ``engine`` and ``frontend`` and below ``cli`` (see ``server/__init__.py``).
"""

from server.api.app import create_app
from server.api.settings import ApiSettings

__all__ = ["ApiSettings", "create_app"]
