"""``POST /admin/reload``: apply a changed profile to the running server (admin only)."""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Controller, Request, Response, post
from litestar.di import NamedDependency
from litestar.params import JSONBody

from server.api.errors import error_response
from server.api.reload import ProfileRejected, Reloader, ReloadReport, ReloadUnavailable
from server.frontend import error_body

__all__ = ["ReloadController", "ReloadRequest"]


class ReloadRequest(msgspec.Struct, frozen=True, kw_only=True):
    """What to reload.

    Attributes:
        path: A profile file on the server's machine; default: the file the server runs (as last reloaded).
        dry_run: Validate and report what would change, without applying it.
    """

    path: str | None = None
    dry_run: bool = False


def _rejected(_: Request[Any, Any, Any], exc: ProfileRejected) -> Response[dict[str, Any]]:
    """422 with every error at ``file:line:col``, in the message and as a list."""
    lines = [f"The profile has {len(exc.errors)} error(s); nothing changed.", *(str(issue) for issue in exc.errors)]
    body = error_body(422, "\n".join(lines), code="invalid_profile")
    body["issues"] = msgspec.to_builtins([*exc.errors, *exc.warnings])
    return Response(body, status_code=422)


class ReloadController(Controller):
    """``/admin/reload``."""

    path = "/admin"
    tags = ["Admin"]
    exception_handlers = {ProfileRejected: _rejected}

    @post("/reload", status_code=200)
    async def reload(
        self,
        data: JSONBody[ReloadRequest],
        reloader: NamedDependency[Reloader | None],
        reload_unavailable: NamedDependency[ReloadUnavailable],
    ) -> ReloadReport | Response[dict[str, Any]]:
        """Validate a profile and apply it: frontends at once, engine settings at each model's next load.

        ``path`` must be the served profile or a YAML/JSON file under ``server.reload_dirs`` (default: the served
        profile's folder), symlinks resolved: any other is refused with 403 ``reload_path_refused``, unread, as is
        a path that a symlink replaced after the check (the resolved path is opened once, following no link); a
        path with a NUL byte is 400 ``invalid_reload_path``.
        Errors change nothing: 422 ``invalid_profile`` lists every profile error at ``file:line:col`` (also in
        ``issues``); 409 ``reload_refused`` when it would remove the active model or a switch is under way; 422
        ``reload_failed`` when the active model's new frontend cannot be built; 501 ``reload_unavailable`` where
        this server cannot reload (started without a profile file, or a Ray Serve replica: redeploy instead).
        """
        if reloader is None:
            return error_response(501, reload_unavailable.reason, code="reload_unavailable")
        return await reloader.reload(data.path, dry_run=data.dry_run)
