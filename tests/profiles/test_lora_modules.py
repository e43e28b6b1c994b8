"""``lora_modules``: adapter folders, their rank, ``enable_lora``, and adapter names that clash with other names."""

from __future__ import annotations

import json
from pathlib import Path

from tests.profiles.conftest import Check, where


def _adapter(root: Path, name: str, rank: int = 8, *, weights: bool = True) -> Path:
    folder = root / "adapters" / name
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": rank}))
    if weights:
        (folder / "adapter_model.safetensors").write_bytes(b"{}")
    return folder


def test_adapters_resolve_against_the_profile_folder(check: Check, workspace: Path) -> None:
    folder = _adapter(workspace, "pirate")
    result = check(
        """\
        models:
          base:
            model: models/tiny
            enable_lora: true
            max_lora_rank: 8
            lora_modules:
              pirate: adapters/pirate
        """
    )
    assert where(result) == []
    assert result.profile is not None
    model = result.profile.models["base"]
    assert model.lora_modules == {"pirate": str(folder)}
    # The LoRA engine arguments are vLLM's: they pass through; lora_modules is Turnout's own key.
    assert model.engine_args == {"enable_lora": True, "max_lora_rank": 8}


def test_a_broken_adapter_is_reported_where_it_is_written(check: Check, workspace: Path) -> None:
    _adapter(workspace, "wide", rank=32)
    _adapter(workspace, "empty", weights=False)
    (workspace / "adapters" / "plain").mkdir()
    result = check(
        """\
        models:
          base:
            model: models/tiny
            enable_lora: true
            lora_modules:
              gone: adapters/missing
              wide: adapters/wide
              empty: adapters/empty
              plain: adapters/plain
              blank: ""
          other:
            model: models/tiny
            lora_modules: [adapters/wide]
        """
    )
    missing = workspace / "adapters" / "missing"
    assert where(result) == [
        f"6:13: model 'base': adapter 'gone': adapter folder 'adapters/missing' does not exist (resolved to {missing})",
        "7:13: model 'base': adapter 'wide': its rank r=32 is above max_lora_rank (16); raise the engine argument "
        "max_lora_rank",
        "8:14: model 'base': adapter 'empty': 'adapters/empty' has no adapter weights (adapter_model.safetensors, "
        "adapter_model.bin, adapter_model.pt)",
        "9:14: model 'base': adapter 'plain': 'adapters/plain' has no adapter_config.json: not a PEFT LoRA adapter "
        "folder",
        "10:14: model 'base': adapter 'blank' must name an adapter folder, got ''",
        "13:19: model 'other': lora_modules must be a mapping of adapter name to adapter folder (as vLLM's "
        "--lora-modules name=path), got a list",
    ]


def test_adapters_need_enable_lora(check: Check, workspace: Path) -> None:
    _adapter(workspace, "pirate")
    result = check(
        """\
        models:
          base:
            model: models/tiny
            enable_lora: false
            lora_modules:
              pirate: adapters/pirate
        """
    )
    assert where(result) == [
        "5:5: model 'base': lora_modules needs the engine argument enable_lora: true (vLLM starts the engine "
        "without LoRA support otherwise)"
    ]


def test_an_adapter_name_reaches_one_model_only(check: Check, workspace: Path) -> None:
    _adapter(workspace, "pirate")
    result = check(
        """\
        models:
          a:
            model: models/tiny
            served_model_name: alias
            enable_lora: true
            lora_modules:
              pirate: adapters/pirate
              b: adapters/pirate
          b:
            model: models/tiny
            enable_lora: true
            lora_modules:
              alias: adapters/pirate
              pirate: adapters/pirate
        """
    )
    assert where(result) == [
        "8:7: model 'a': adapter 'b' is already the name of model 'b'",
        "13:7: model 'b': adapter 'alias' is already a served_model_name of model 'a'",
        "14:7: model 'b': adapter 'pirate' is already an adapter of model 'a'",
    ]
