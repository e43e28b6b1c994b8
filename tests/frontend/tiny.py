"""The tiny engines the frontend tests run: names, sizes, and how one is started."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = [
    "CLASSIFY_MODEL",
    "EMBED_MODEL",
    "MAX_MODEL_LEN",
    "TOOLS_MODEL",
    "engine_cache_salts",
    "running_engine_ids",
    "start_engine",
]

TOOLS_MODEL = "tiny-tools"
EMBED_MODEL = "tiny-embed"
CLASSIFY_MODEL = "tiny-classify"
MAX_MODEL_LEN = 512


def start_engine(model: Path, served_name: str, **engine_args: Any) -> Any:
    """A small CPU `AsyncLLM`: short context, 64 MiB of KV cache, no compilation (blocks ~25 s)."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    defaults: dict[str, Any] = {
        "max_model_len": MAX_MODEL_LEN,
        "max_num_seqs": 8,
        "kv_cache_memory_bytes": 64 << 20,
        "enforce_eager": True,
        "disable_log_stats": True,
    }
    # `engine_args` may override the defaults (the tiny Whisper's decoder has only 448 positions).
    args = AsyncEngineArgs(model=str(model), served_model_name=[served_name], **{**defaults, **engine_args})
    return AsyncLLM.from_engine_args(args)


def running_engine_ids(engine: Any, request_id: str) -> tuple[str, ...]:
    """The external request ids the engine itself has unfinished for our ``request_id`` (vLLM derives them from
    it: ``chatcmpl-ID``, ``cmpl-ID-0``, ``embd-ID-1``), read from its output processor: what the engine runs, not
    what the bundle recorded. A stream's request appears only once its first chunk is read (vLLM adds it then).
    """
    return tuple(sorted(name for name in engine.output_processor.external_req_ids if request_id in name))


def engine_cache_salts(engine: Any, monkeypatch: Any) -> list[str | None]:
    """The ``cache_salt`` of each request the engine's core gets from now on (in order): what its prefix cache
    hashes, past every layer that builds the request (monkeypatch undoes the spy)."""
    salts: list[str | None] = []
    core = engine.engine_core
    add = core.add_request_async

    async def recorded(request: Any) -> Any:
        salts.append(request.cache_salt)
        return await add(request)

    monkeypatch.setattr(core, "add_request_async", recorded)
    return salts
