"""``python -m server.tinymodels [CACHE_DIR]``: build the tiny models (or find them cached), print paths."""

from __future__ import annotations

import sys
from pathlib import Path

from server.tinymodels.builder import build_tiny_models

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Build every tiny model and print ``name<TAB>folder`` lines; the optional argument is the cache."""
    args = sys.argv[1:] if argv is None else argv
    for name, path in build_tiny_models(Path(args[0]) if args else None).items():
        print(f"{name}\t{path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
