"""Code, test, benchmark and script comments say the reason, not a tracker's number: a reader of ``server/`` has
no project tracker beside it, and a bare number tells them nothing. References to another project's tracker keep its
name (``vllm#29341``, ``ls#1004``), which says where to look. Each check runs on a planted example first, so a scan
that matched nothing cannot pass. This file is the one exception: it holds the planted examples."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: The trees whose comments and docstrings a newcomer reads with the code.
TREES = ("server", "tests", "benchmarks", "scripts")
SUFFIXES = {".py", ".sh"}
#: ``#28`` alone; not ``vllm#28`` (another project's tracker, named), an HTML entity ``&#28;``, a colour ``#a0b0c0``
#: (its digits run on past three) or a URL fragment ``/#28``.
BARE_NUMBER = re.compile(r"(?<![\w#&/])#\d{1,3}\b(?!;)")


def bare_numbers(text: str) -> list[int]:
    """The lines of ``text`` that cite a bare tracker number."""
    return [number for number, line in enumerate(text.splitlines(), 1) if BARE_NUMBER.search(line)]


@pytest.mark.parametrize(
    ("text", "cited"),
    [
        ("# see the closing note of #28\n", True),
        ('"""Fixed in (#25)."""\n', True),
        ("# vLLM serves garbage after a wake (vllm#29341)\n", False),
        ("# llama-swap's matrix (ls#1004)\n", False),
        ("colour = '#a0b0c0'\nentity = '&#39;'\nurl = 'https://example.org/#12'\n", False),
    ],
)
def test_the_scan_sees_a_planted_number(text: str, cited: bool) -> None:
    assert bool(bare_numbers(text)) is cited


def test_no_comment_cites_a_bare_issue_number() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for tree in TREES
        for path in sorted((ROOT / tree).rglob("*"))
        if path.suffix in SUFFIXES and path.is_file() and path != Path(__file__).resolve()
        for line in bare_numbers(path.read_text(encoding="utf-8", errors="replace"))
    ]
    assert not found, f"say the reason instead of an issue number: {found}"
