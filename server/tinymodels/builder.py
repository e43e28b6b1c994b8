"""Build tiny Llama models into a cache folder, once.

Each model folder holds a stamp with its spec's fingerprint; a folder whose stamp matches is reused as is, so
a second run costs a few file reads. A build happens in a temporary folder beside the target and is renamed
into place only when complete, so a crash never leaves half a model where a complete one is expected.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from importlib.metadata import version
from pathlib import Path

from server.tinymodels.spec import REPO_ROOT, SPECS, TinyModelSpec

__all__ = [
    "CACHE_ENV",
    "STAMP_FILE",
    "build_tiny_model",
    "build_tiny_models",
    "default_cache_dir",
    "fingerprint",
    "is_built",
]

#: Env var that moves the default cache folder.
CACHE_ENV = "TURNOUT_TINY_MODELS"
#: Written last into a model folder: its presence with the right fingerprint means "complete and current".
STAMP_FILE = "turnout-tiny.json"


def default_cache_dir() -> Path:
    """``$TURNOUT_TINY_MODELS`` if set, else ``<repo root>/.cache/tiny-models``."""
    return Path(os.environ.get(CACHE_ENV) or REPO_ROOT / ".cache" / "tiny-models")


def fingerprint(spec: TinyModelSpec) -> str:
    """A hash of everything a build depends on: equal hashes mean equal models.

    That is the spec, its template's text, this package's code (so a change to training or saving rebuilds
    without anyone remembering to bump a version) and the versions of the libraries that write the files.
    """
    digest = hashlib.sha256()
    digest.update(json.dumps(asdict(spec), sort_keys=True).encode())
    digest.update(spec.template_path.read_bytes())
    for source in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(source.read_bytes())
    for library in ("torch", "transformers", "tokenizers"):
        digest.update(version(library).encode())
    return digest.hexdigest()


def is_built(spec: TinyModelSpec, dest: Path) -> bool:
    """Whether ``dest`` holds a complete build of ``spec`` (its stamp carries the spec's fingerprint)."""
    try:
        stamp = json.loads((dest / STAMP_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(stamp, dict) and stamp.get("fingerprint") == fingerprint(spec)


def build_tiny_models(cache_dir: Path | None = None, specs: Sequence[TinyModelSpec] = SPECS) -> dict[str, Path]:
    """Build every spec into ``cache_dir/<name>`` unless an up-to-date build is already there.

    Safe to call from several processes at once: builds are serialized by a lock file in ``cache_dir``.

    Args:
        cache_dir: Where the model folders live; ``None`` means ``default_cache_dir()``.
        specs: The models to build; the default is ``tiny-tools`` and ``tiny-plain``.

    Returns:
        Model name to its folder (absolute), for example ``{"tiny-tools": ..., "tiny-plain": ...}``.
    """
    root = (cache_dir or default_cache_dir()).resolve()
    root.mkdir(parents=True, exist_ok=True)
    paths = {spec.name: root / spec.name for spec in specs}
    if all(is_built(spec, paths[spec.name]) for spec in specs):
        return paths
    with _locked(root / ".lock"):
        for spec in specs:
            # Checked again under the lock: another process may have built it while this one waited.
            if not is_built(spec, paths[spec.name]):
                build_tiny_model(spec, paths[spec.name])
    return paths


def build_tiny_model(spec: TinyModelSpec, dest: Path) -> Path:
    """Build ``spec`` into ``dest`` unconditionally, replacing whatever is there.

    The model is written to a temporary folder beside ``dest`` and renamed into place when complete.

    Args:
        spec: What to build.
        dest: The model folder to create or replace.

    Returns:
        ``dest``.

    Raises:
        RuntimeError: Training did not reach the spec's answers (nothing is written to ``dest`` then).
    """
    # Imported here, not at the top: see the writer module.
    from server.tinymodels.writer import write_model

    dest = dest.resolve()
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; the model folder should read like any other
    try:
        started = time.monotonic()
        steps = write_model(spec, tmp)
        stamp = {
            "name": spec.name,
            "fingerprint": fingerprint(spec),
            "train_steps": steps,
            "build_seconds": round(time.monotonic() - started, 2),
        }
        # Last file written: a folder with a matching stamp is complete.
        (tmp / STAMP_FILE).write_text(json.dumps(stamp, indent=2) + "\n", encoding="utf-8")
        _replace_dir(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def _replace_dir(src: Path, dest: Path) -> None:
    """Move ``src`` to ``dest``; an existing ``dest`` is moved aside first and removed only afterwards."""
    if not dest.exists():
        src.rename(dest)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.old-", dir=dest.parent))
    old.rmdir()
    dest.rename(old)
    src.rename(dest)
    shutil.rmtree(old, ignore_errors=True)


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
