"""Checking a ``quant_config``: an Intel Neural Compressor (INC) JSON file that vLLM-Gaudi reads from
``QUANT_CONFIG``."""

from __future__ import annotations

import glob
import importlib.util
import json
from pathlib import Path

from server.profiles.check_context import Finding

__all__ = ["check_quant_config", "inc_installed"]


def inc_installed() -> bool:
    """Whether Intel Neural Compressor can be imported here (checked without importing it)."""
    try:
        return importlib.util.find_spec("neural_compressor") is not None
    except (ImportError, ValueError):
        return False


def check_quant_config(path: Path, shown: str, cwd: Path) -> list[Finding]:
    """Check one quant_config file.

    Args:
        path: The resolved file.
        shown: The path as the profile wrote it (for messages).
        cwd: The working directory, which INC resolves a relative ``dump_stats_path`` against.

    Returns:
        Errors when the file is missing or not a JSON object; warnings for what this machine lacks to use it.
    """
    what = f"quant_config {shown!r}"
    if not path.exists():
        return [("error", f"{what} not found: there is no file at {path}")]
    if not path.is_file():  # a folder, a FIFO or a device: reading it could block forever
        return [("error", f"{what} is not a regular file ({path})")]
    try:
        config = json.loads(path.read_bytes())
    except OSError as exc:
        return [("error", f"{what} cannot be read: {exc.strerror or exc}")]
    except UnicodeDecodeError:
        return [("error", f"{what} is not JSON: {path} is not UTF-8 text")]
    except json.JSONDecodeError as exc:
        return [("error", f"{what} is not JSON: {exc.msg} (line {exc.lineno}, column {exc.colno} of {path})")]
    if not isinstance(config, dict):
        return [("error", f"{what} must hold a JSON object (an INC config), not {type(config).__name__}")]
    findings: list[Finding] = []
    if not inc_installed():
        findings.append(
            (
                "warning",
                f"{what} needs Intel Neural Compressor (Python module neural_compressor), which is not "
                "installed here; INC fp8 runs on Gaudi (HPU) with vllm-gaudi",
            )
        )
    findings.extend(_check_measurements(config, what, cwd))
    return findings


def _check_measurements(config: dict[str, object], what: str, cwd: Path) -> list[Finding]:
    mode, stats = config.get("mode"), config.get("dump_stats_path")
    if not isinstance(mode, str) or mode.upper() != "QUANTIZE" or not isinstance(stats, str) or not stats:
        return []
    # INC reads "<dump_stats_path>_hooks_maxabs*.json/.npz" files written by an earlier MEASURE run.
    prefix = Path(stats) if Path(stats).is_absolute() else cwd / stats
    if prefix.parent.is_dir() and any(prefix.parent.glob(glob.escape(prefix.name) + "*")):
        return []
    return [
        (
            "warning",
            f"{what} quantizes with measurements from dump_stats_path {stats!r}, but there are none here "
            f"(no files matching {prefix}*; INC resolves a relative path against the server's working "
            "directory); run INC's MEASURE pass first",
        )
    ]
