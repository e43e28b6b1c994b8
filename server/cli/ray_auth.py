"""Ray's token authentication on the local cluster ``turnout ray-serve`` starts.

Without it, anyone who reaches a Ray node's ports (GCS, raylet, dashboard, Jobs API) can run code as the user who
started it. Ray 2.52.0 added token authentication (``RAY_AUTH_MODE=token``: every RPC and HTTP entry point then
needs the cluster's token; docs.ray.io "Ray token authentication": "available in Ray 2.52.0 or later", off by
default there). The pinned Ray (2.60.0) turns it on by itself for a new local ``ray.init()`` unless
``RAY_AUTH_MODE`` is set (``enable_token_auth_by_default`` in ``ray/_private/worker.py``); Turnout sets
``RAY_AUTH_MODE=token`` explicitly, so it is on with any Ray from 2.52.0, and says so when it cannot be. It sets it
before Ray is imported: Ray reads its configuration, the mode included, on import, and a mode set after starts a
cluster that asks for the token its own driver never sends (``InvalidAuthToken``). So the version is read from
Ray's package metadata (:func:`installed_ray_version`), not from ``ray.__version__``.

The token: ``RAY_AUTH_TOKEN`` or ``RAY_AUTH_TOKEN_PATH`` when set, else Ray's default file ``~/.ray/auth_token``.
Ray writes that file with the process's umask (mode 0644 under the usual 022), readable by other local users
where the home folder is; so when no token exists yet, Turnout creates it first, mode 0600, with as much entropy
as Ray's own generator (``secrets.token_hex(32)``). An explicit ``RAY_AUTH_MODE`` other than ``token`` is the
operator's choice and is kept, with a warning. ``--address`` joins a cluster whose own settings apply.
"""

from __future__ import annotations

import importlib.metadata
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

__all__ = [
    "AUTH_MODE_ENV",
    "TOKEN_AUTH_SINCE",
    "RayAuth",
    "installed_ray_version",
    "local_ray_auth",
    "private_token_file",
]

#: Ray's switch for its authentication (``disabled`` or ``token``).
AUTH_MODE_ENV: Final = "RAY_AUTH_MODE"
#: The first Ray release with token authentication.
TOKEN_AUTH_SINCE: Final = (2, 52, 0)
_TOKEN_ENVS: Final = ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")


@dataclass(frozen=True)
class RayAuth:
    """How the local cluster is started.

    Attributes:
        env: Variables to set in this process before ``ray.init`` (Ray's processes inherit them).
        warning: Why the cluster runs without token authentication, when it does.
    """

    env: Mapping[str, str] = field(default_factory=dict)
    warning: str | None = None


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for part in text.split(".")[:3]:
        digits = "".join(char for char in part if char.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def installed_ray_version() -> str | None:
    """The installed Ray's version, from its package metadata (None: Ray is not installed).

    Read without importing Ray: Ray reads ``RAY_AUTH_MODE`` when it is imported, so the mode must be set before.
    """
    try:
        return importlib.metadata.version("ray")
    except importlib.metadata.PackageNotFoundError:
        return None


def local_ray_auth(ray_version: str, environ: Mapping[str, str]) -> RayAuth:
    """Token authentication for a new local cluster of Ray ``ray_version``, unless ``environ`` turns it off."""
    exposed = "anyone who reaches this machine's Ray ports can run code as this user"
    if _version(ray_version) < TOKEN_AUTH_SINCE:
        return RayAuth(warning=f"Ray {ray_version} has no token authentication (Ray 2.52.0 added it): {exposed}")
    mode = environ.get(AUTH_MODE_ENV)
    if mode is not None and mode.strip().lower() != "token":
        return RayAuth(warning=f"{AUTH_MODE_ENV}={mode}: Ray's token authentication is off as asked; {exposed}")
    return RayAuth(env={AUTH_MODE_ENV: "token"})


def private_token_file(environ: Mapping[str, str], token_file: Path) -> Path | None:
    """Create Ray's default token file, mode 0600 in a 0700 folder, when no token is configured; returns it when
    created (None when ``RAY_AUTH_TOKEN``/``RAY_AUTH_TOKEN_PATH`` is set or the file exists: Ray uses those)."""
    if any(environ.get(name) for name in _TOKEN_ENVS) or os.path.lexists(token_file):
        return None
    token_file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:  # another start made it meanwhile: Ray reads that one
        return None
    with os.fdopen(fd, "w") as file:
        file.write(secrets.token_hex(32))
    return token_file
