"""Resolving a model's ``model:`` value to a local folder or a Hugging Face hub id, and checking it exists."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from server.profiles.check_context import Finding

__all__ = ["hf_cache_dir", "resolve_model"]

#: The folder the demo's tiny models are built in (``server/tinymodels``, which this layer does not import): a
#: missing model under it is named as the demo's, with the command that builds it.
_DEMO_MODELS_FOLDER: Final = "tiny-models"

# A hub id is "name" or "owner/name"; anything else (more slashes, "..", a leading dot) is a filesystem path.
_HUB_ID: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*(/[A-Za-z0-9_][A-Za-z0-9_.-]*)?")


def resolve_model(
    raw: str, profile_dir: Path, cwd: Path, env: Mapping[str, str], download_dir: str | None = None
) -> tuple[str, list[Finding]]:
    """Resolve a ``model:`` value and check that vLLM will find it.

    A relative path resolves against the profile's folder when it exists there; vLLM-Gaudi passed ``model``
    unchanged, so a path that exists only under the working directory still works, with a warning. A value
    that looks like a path must exist and hold ``config.json``. Anything else is a hub id: fine when the
    Hugging Face cache has it, else a warning: vLLM would download it at the model's first load.

    Args:
        raw: The value as written.
        profile_dir: The profile file's folder.
        cwd: The working directory.
        env: The environment (for the Hugging Face cache location).
        download_dir: The model's ``download_dir`` engine argument, which vLLM uses as the cache when set.

    Returns:
        What to hand vLLM (an absolute folder, or the hub id as written) and the problems found.
    """
    expanded = Path(os.path.expanduser(raw))
    looks_local = expanded.is_absolute() or raw.startswith((".", "~")) or _HUB_ID.fullmatch(raw) is None
    candidates = [expanded] if expanded.is_absolute() else [profile_dir / expanded, cwd / expanded]
    for candidate in candidates:
        if candidate.exists():
            resolved = Path(os.path.abspath(candidate))
            findings = _check_local(resolved, raw)
            if candidate is not candidates[0]:
                findings.append(
                    (
                        "warning",
                        f"model path {raw!r} was found under the working directory ({resolved}), not under "
                        f"the profile's folder ({profile_dir}); it only works when the server starts there",
                    )
                )
            return str(resolved), findings
    if looks_local:
        message = f"model path {raw!r} does not exist: there is no folder at {candidates[0]}"
        if _DEMO_MODELS_FOLDER in candidates[0].parts:
            message += "; these are the demo's tiny models, which `turnout demo` builds on its first run"
        return raw, [("error", message)]
    findings = _check_hub(raw, env, download_dir)
    if findings and candidates[0].parent.is_dir():
        # "models/x" is a valid hub id too; when "models/" exists here, the user most likely meant a folder.
        severity, message = findings[0]
        findings[0] = (severity, f"{message} (if you meant a local folder: there is none at {candidates[0]})")
    return raw, findings


def _check_local(path: Path, raw: str) -> list[Finding]:
    if path.is_dir():
        if (path / "config.json").is_file():
            return []
        return [("error", f"model folder {raw!r} ({path}) has no config.json, so vLLM cannot load it")]
    if path.suffix == ".gguf":
        return []
    return [("error", f"model path {raw!r} is a file ({path}); it must be a model folder holding config.json")]


def hf_cache_dir(env: Mapping[str, str]) -> Path:
    """The Hugging Face hub cache folder, found the way ``huggingface_hub`` finds it."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if env.get(var):
            return Path(env[var]).expanduser()
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]).expanduser() / "hub"
    home = Path(env["HOME"]) if env.get("HOME") else Path.home()
    cache = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else home / ".cache"
    return cache / "huggingface" / "hub"


def _check_hub(hub_id: str, env: Mapping[str, str], download_dir: str | None) -> list[Finding]:
    caches = [Path(download_dir).expanduser()] if download_dir else []
    caches.append(hf_cache_dir(env))
    entry = "models--" + hub_id.replace("/", "--")
    for cache in caches:
        if any((cache / entry).glob("snapshots/*/config.json")):
            return []
    cache = caches[0]
    state = "is only partly in" if (cache / entry).is_dir() else "is not in"
    missing = (
        f"{hub_id!r} is a Hugging Face hub id and {state} the local cache (no {cache / entry}/snapshots/*/config.json)"
    )
    if env.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return [
            (
                "warning",
                f"{missing}, and HF_HUB_OFFLINE is set, so vLLM cannot download it and its load will fail; download "
                f"it where there is network (hf download {hub_id}) and copy it into {cache}, or set model: to a "
                "local folder that holds config.json",
            )
        ]
    return [
        (
            "warning",
            f"{missing}: vLLM downloads it when the model first loads, which needs network then and makes that "
            f"load as slow as the download, and until then its size is unknown to the memory plan; download it "
            f"now with `hf download {hub_id}`, or set model: to a local folder that holds config.json",
        )
    ]
