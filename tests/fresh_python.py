"""Python code run in a fresh interpreter: what a module imports shows only where nothing else loaded it first."""

from __future__ import annotations

import subprocess
import sys


def fresh_python(code: str, timeout: float = 120) -> str:
    """Run ``code`` with this interpreter in a new process; returns its stripped stdout (fails on a non-zero exit)."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=timeout)
    return done.stdout.strip()
