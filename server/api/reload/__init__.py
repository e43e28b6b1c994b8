"""Applying a changed profile to a running server: ``POST /admin/reload``, ``turnout reload`` and ``serve --watch``.

Public names, by the module that owns them: the :class:`Reloader` and its answers (``reloader.py``), the profile
watch of ``serve --watch`` (``profile_watch.py``: :func:`watch_profile`). Behind them: which files a reload may read
(``reload_paths.py``). It builds on the edge (the key ring and the withheld secrets); the stack source creates the
reloader, the reload controller calls it.
"""

from server.api.reload.profile_watch import watch_profile
from server.api.reload.reloader import (
    NO_PROFILE_FILE,
    ProfileRejected,
    Reloader,
    ReloadReport,
    ReloadUnavailable,
)

__all__ = [
    "NO_PROFILE_FILE",
    "ProfileRejected",
    "ReloadReport",
    "ReloadUnavailable",
    "Reloader",
    "watch_profile",
]
