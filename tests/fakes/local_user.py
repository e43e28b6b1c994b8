"""Another local user of the host (``nobody``): runs a step in a process of its own, to plant things on tmpfs
where a Turnout server keeps its KV pool."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Final

__all__ = ["NOBODY", "PLAIN_PYTHON", "as_nobody", "can_plant", "plant_beside_pools", "planted_tree"]

NOBODY: Final = 65534
#: A Python that ``nobody`` may run (the virtual environment's may sit in root's home).
PLAIN_PYTHON: Final = shutil.which("python3", path="/usr/bin:/bin")


def can_plant() -> bool:
    """Whether this process may run steps as ``nobody`` (it runs as root, and a system Python is there)."""
    return os.geteuid() == 0 and PLAIN_PYTHON is not None


def as_nobody(script: str) -> None:
    """Run ``script`` (Python) as ``nobody``; ``CalledProcessError`` when it fails (a permission refused)."""

    def drop() -> None:
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)

    assert PLAIN_PYTHON is not None
    subprocess.run(
        [PLAIN_PYTHON, "-c", script],
        check=True,
        preexec_fn=drop,
        timeout=60,
        cwd="/",
        capture_output=True,
    )


def plant_beside_pools(shm: Path, tag: str) -> Path:
    """As ``nobody``, plant in ``shm`` what the old pool trusted, and return the folder it aims at (``victim``,
    nobody's, holding ``precious``): a folder of the pool's prefix open to all, holding a names record of every
    served name that names ``victim``, a model folder linked to it and a 10 GiB sparse block; and a link of the
    pool's prefix to ``victim``."""
    victim = shm / f"victim-{tag}"
    as_nobody(
        f"""
import hashlib, os
shm, victim, tag = {str(shm)!r}, {str(victim)!r}, {tag!r}
os.mkdir(victim); open(victim + "/precious", "w").write("keep me")
planted = shm + "/turnout-kv-planted-" + tag
os.mkdir(planted); os.chmod(planted, 0o777); os.mkdir(planted + "/names")
for name in ("plain", "tools"):
    open(planted + "/names/" + hashlib.sha256(name.encode()).hexdigest()[:32], "w").write(victim)
os.symlink(victim, planted + "/" + "a" * 32)
os.symlink(victim, shm + "/turnout-kv-link-" + tag)
os.mkdir(planted + "/" + "b" * 32)
with open(planted + "/" + "b" * 32 + "/" + "c" * 64, "wb") as f:
    f.truncate(10 * 2**30)
"""
    )
    return victim


def planted_tree(shm: Path, tag: str) -> list[str]:
    """What :func:`plant_beside_pools` left, to compare before and after."""
    planted = shm / f"turnout-kv-planted-{tag}"
    return [*sorted(str(p) for p in planted.rglob("*")), str(os.readlink(shm / f"turnout-kv-link-{tag}"))]
