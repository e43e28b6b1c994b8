"""The builder's cache: a second call does no work, a changed spec rebuilds, a failed build leaves nothing."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from server.tinymodels import (
    CACHE_ENV,
    STAMP_FILE,
    TINY_PLAIN,
    TinyModelSpec,
    build_tiny_model,
    build_tiny_models,
    default_cache_dir,
    is_built,
)
from server.tinymodels import builder as builder_module
from server.tinymodels import writer as writer_module
from server.tinymodels.spec import REPO_ROOT

# Untrained (train_steps=0): a complete model folder in about a second.
FAST = dataclasses.replace(TINY_PLAIN, name="fast", train_steps=0)


def _stamp(folder: Path) -> dict[str, object]:
    stamp: dict[str, object] = json.loads((folder / STAMP_FILE).read_text())
    return stamp


def _fail(*args: object, **kwargs: object) -> None:
    raise AssertionError("no build expected")


def test_builds_a_complete_model_folder(tmp_path: Path) -> None:
    paths = build_tiny_models(tmp_path, specs=[FAST])

    assert paths == {"fast": tmp_path.resolve() / "fast"}
    files = {p.name for p in paths["fast"].iterdir()}
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json"} <= files
    assert {"tokenizer_config.json", STAMP_FILE} <= files
    assert is_built(FAST, paths["fast"])


def test_second_call_does_no_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = build_tiny_models(tmp_path, specs=[FAST])
    stamp = first["fast"] / STAMP_FILE
    before = stamp.stat().st_mtime_ns
    monkeypatch.setattr(builder_module, "build_tiny_model", _fail)

    second = build_tiny_models(tmp_path, specs=[FAST])

    assert second == first
    assert stamp.stat().st_mtime_ns == before


def test_changed_spec_rebuilds(tmp_path: Path) -> None:
    build_tiny_models(tmp_path, specs=[FAST])
    changed = dataclasses.replace(FAST, seed=FAST.seed + 1)
    assert not is_built(changed, tmp_path / "fast")

    build_tiny_models(tmp_path, specs=[changed])

    assert is_built(changed, tmp_path / "fast")
    assert not is_built(FAST, tmp_path / "fast")


def test_changed_template_rebuilds(tmp_path: Path) -> None:
    template = tmp_path / "t.jinja"
    template.write_text(FAST.template_path.read_text())
    spec = dataclasses.replace(FAST, template=str(template))  # an absolute path wins over templates/
    build_tiny_model(spec, tmp_path / "fast")
    assert is_built(spec, tmp_path / "fast")

    template.write_text(template.read_text() + "{#- edited -#}\n")

    assert not is_built(spec, tmp_path / "fast")


@pytest.mark.parametrize("stamp", [None, "not json", '{"fingerprint": "other"}', "[]"])
def test_missing_or_bad_stamp_means_not_built(tmp_path: Path, stamp: str | None) -> None:
    folder = build_tiny_model(FAST, tmp_path / "fast")
    if stamp is None:
        (folder / STAMP_FILE).unlink()
    else:
        (folder / STAMP_FILE).write_text(stamp)

    assert not is_built(FAST, folder)


def test_failed_build_leaves_no_folder_and_no_debris(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def crash(*args: object, **kwargs: object) -> int:
        raise RuntimeError("crash in training")

    monkeypatch.setattr(writer_module, "train", crash)

    with pytest.raises(RuntimeError, match="crash in training"):
        build_tiny_models(tmp_path, specs=[FAST])

    assert sorted(p.name for p in tmp_path.iterdir()) == [".lock"]


def test_failed_rebuild_keeps_the_old_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = build_tiny_model(FAST, tmp_path / "fast")
    old = _stamp(folder)

    def crash_on_save(*args: object, **kwargs: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(writer_module, "_portable_tokenizer_config", crash_on_save)
    with pytest.raises(OSError, match="disk full"):
        build_tiny_model(FAST, folder)

    assert _stamp(folder) == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fast"]


def test_rebuild_replaces_the_folder(tmp_path: Path) -> None:
    folder = build_tiny_model(FAST, tmp_path / "fast")
    (folder / "leftover.txt").write_text("from an older build")

    build_tiny_model(FAST, folder)

    assert not (folder / "leftover.txt").exists()
    assert is_built(FAST, folder)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fast"]


def test_default_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(CACHE_ENV, raising=False)
    assert default_cache_dir() == REPO_ROOT / ".cache" / "tiny-models"

    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    assert default_cache_dir() == tmp_path


def test_spec_special_tokens_have_no_duplicates() -> None:
    spec = TinyModelSpec(
        name="x",
        template="tiny-bracket.jinja",
        bos_token="<s>",
        eos_token="<s>",
        pad_token="<s>",
        plain_answer="a",
    )

    assert spec.special_tokens == ("<s>",)


def test_cached_call_imports_neither_torch_nor_transformers(tiny_models: dict[str, Path]) -> None:
    # In a fresh interpreter: this one has imported both long ago.
    cache = tiny_models["tiny-tools"].parent
    code = (
        "import sys; from pathlib import Path; from server.tinymodels import build_tiny_models; "
        f"build_tiny_models(Path({str(cache)!r})); "
        "print(sorted({'torch', 'transformers'} & set(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO_ROOT)

    assert done.stdout.strip() == "[]"
