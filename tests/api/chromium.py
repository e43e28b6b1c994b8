"""Headless Chromium (Debian's ``chromium``) for the status page test: the DOM and a screenshot of a URL.

``.ci/run`` installs it when missing and sets ``TURNOUT_REQUIRE_CHROMIUM=1``, so CI fails rather than skips
without it; elsewhere the test skips when no browser is installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

__all__ = ["dump_dom", "screenshot"]

# The flags that work on a headless, sandbox-less, offline machine; a fresh profile folder per run.
_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def _browser() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    if os.environ.get("TURNOUT_REQUIRE_CHROMIUM") == "1":
        pytest.fail("headless Chromium is required here: apt-get install -y chromium")
    pytest.skip("no chromium installed (apt-get install -y chromium; .ci/run installs it)")


def _run(*args: str, timeout: float = 120.0) -> str:
    with tempfile.TemporaryDirectory(prefix="turnout-chromium-") as profile_dir:
        result = subprocess.run(
            [_browser(), *_FLAGS, f"--user-data-dir={profile_dir}", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def dump_dom(url: str) -> str:
    """The page's DOM after load, as Chromium serializes it."""
    return _run("--dump-dom", url)


def screenshot(url: str, path: Path, size: str = "1100,720") -> None:
    """Save a PNG of the page at ``path``."""
    _run(f"--screenshot={path}", f"--window-size={size}", "--hide-scrollbars", url)
