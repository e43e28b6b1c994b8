"""The corpus of broken profiles: each one's full report, positions included, must match its golden file.

Each ``broken/NAME.yaml`` (or ``.json``) has ``broken/NAME.expected``: every issue as
``file:line:col: severity: message``, with ``{here}`` for the corpus folder. To regenerate after a deliberate
change of wording, run with ``TURNOUT_UPDATE_GOLDEN=1`` and review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from server.profiles import validate_profile
from tests.fakes.parsers import FakeParserRegistry

BROKEN = Path(__file__).parent / "broken"
PROFILES = sorted(path.name for path in BROKEN.iterdir() if path.suffix in (".yaml", ".json"))
UPDATE = os.environ.get("TURNOUT_UPDATE_GOLDEN") == "1"


def render(name: str) -> tuple[str, int]:
    """The report for one corpus profile, validated from the corpus folder, and its error count."""
    env = {"HF_HUB_CACHE": str(BROKEN / "support" / "no-hf-cache"), "HOME": str(BROKEN / "support")}
    result = validate_profile(name, env=env, parsers=FakeParserRegistry())
    issues = sorted([*result.errors, *result.warnings], key=lambda issue: (issue.line, issue.col))
    text = "".join(f"{i.file}:{i.line}:{i.col}: {i.severity}: {i.message}\n" for i in issues)
    return text.replace(str(BROKEN), "{here}"), len(result.errors)


def test_the_corpus_is_not_empty() -> None:
    assert len(PROFILES) >= 20


@pytest.mark.parametrize("name", PROFILES)
def test_broken_profile_report_matches_golden(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(BROKEN)
    golden = BROKEN / (Path(name).stem + ".expected")

    report, error_count = render(name)

    if UPDATE:
        golden.write_text(report)
    assert golden.exists(), f"no golden file for {name}; run with TURNOUT_UPDATE_GOLDEN=1 and review it"
    assert error_count > 0, f"{name} is in the broken corpus but has no error"
    assert report == golden.read_text()
