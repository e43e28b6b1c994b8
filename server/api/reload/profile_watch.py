"""``turnout serve --watch``: reload whenever the profile, or a file it names, is saved.

The files are watched through their folders, not one by one: editors often save by writing a new file and
renaming it over the old one, which a watch on the old file would miss. A chat template counts as much as the
profile itself, since a template can change while its path stays the same.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

from watchfiles import awatch

from server.api.reload.reloader import ProfileRejected, Reloader
from server.engine import EngineError
from server.profiles import Profile

__all__ = ["watch_profile", "watched_files"]

logger = logging.getLogger("turnout.api")


def watched_files(profile: Profile) -> frozenset[str]:
    """The profile file and every chat template and quantization file its models name (absolute paths)."""
    files = {profile.path}
    for model in profile.models.values():
        files |= {path for path in (model.chat_template, model.quant_config) if path is not None}
    return frozenset(os.path.abspath(path) for path in files)


async def watch_profile(reloader: Reloader, *, debounce_ms: int = 400, retry_s: float = 5.0) -> None:
    """Reload on every save until cancelled; a rejected profile is logged and changes nothing.

    Nothing but cancelling ends the watch: a reload that fails unexpectedly is logged and the next save is
    watched for, and a watch that fails (a watched folder removed) is logged and started again after ``retry_s``.
    """
    while True:
        try:
            await _watch_until_files_change(reloader, debounce_ms)
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("watching %s failed; watching again in %.0f s", reloader.profile.path, retry_s)
            await asyncio.sleep(retry_s)


async def _watch_until_files_change(reloader: Reloader, debounce_ms: int) -> None:
    files = watched_files(reloader.profile)
    folders = sorted({str(Path(path).parent) for path in files})
    logger.info("watching %d file(s) of %s for changes", len(files), reloader.profile.path)
    async for changes in awatch(*folders, debounce=debounce_ms, recursive=False):
        if {os.path.abspath(path) for _, path in changes} & files:
            await _reload(reloader)
            if watched_files(reloader.profile) != files:
                return  # the reload named other files: watch those instead


async def _reload(reloader: Reloader) -> None:
    try:
        report = await reloader.reload()
    except ProfileRejected as rejected:
        for issue in rejected.errors:
            logger.error("%s", issue)
        logger.error("reload: the profile has %d error(s); nothing changed", len(rejected.errors))
        return
    except EngineError as refused:
        logger.error("reload refused: %s", refused.message)
        return
    except Exception:  # one failed reload must not end the watch: the next save is tried again
        logger.exception("reload of %s failed; nothing changed, still watching", reloader.profile.path)
        return
    for warning in report.warnings:
        logger.warning("%s", warning)
    if not report.changed:
        logger.info("reload: %s is saved but nothing changed", report.profile)
    for model in report.models:
        logger.info("reload: %s", model.note)
    if report.keys_changed:
        logger.info("reload: the API keys changed; they apply from the next request")
    for setting in report.restart_only:
        logger.warning("reload: %s changed; it applies only when the server restarts", setting)
