"""Refreshes the ``AsyncLLM`` object in Turnout's process after its engine core loaded another model.

``AsyncLLM`` keeps its own copy of the model's state next to the engine core: the model config, the renderer
(tokenizer and chat template machinery), the input processor that validates and tokenizes requests, the output
processor that detokenizes, and the output-handler task bound to those. All of it is rebuilt from the target's
``VllmConfig``, the way ``AsyncLLM.__init__`` built it for the first model. Turnout then builds the target's
frontend bundle over the same ``AsyncLLM`` object, as after any other switch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from server.vllm_plugin.protocol import LoadedModel

__all__ = ["RendererFactory", "refresh_async_llm"]

#: Builds ``AsyncLLM``'s renderer for a ``VllmConfig``, as ``AsyncLLM.__init__`` does. It comes from the frontend
#: adapter (``server/frontend/vllm_adapter/``: ``build_renderer``), the one package that imports vLLM's renderers;
#: the CLI wires it in, as it wires the bundle builder.
RendererFactory = Callable[[Any], Any]

logger = logging.getLogger("turnout.engine.reconfigure")


async def refresh_async_llm(engine: Any, config: Any, loaded: LoadedModel, build_renderer: RendererFactory) -> None:
    """Point ``engine`` (vLLM's ``AsyncLLM``) at ``config``, the model its engine core now holds.

    Args:
        engine: The ``AsyncLLM`` whose engine core was reconfigured.
        config: A fresh copy of the target's ``VllmConfig`` (never the one the engine core got).
        loaded: What the engine core reported after the load; its KV cache figures are copied into
            ``config`` as vLLM does with the engine core's ready message at start-up.
        build_renderer: Builds the renderer (tokenizer and chat template machinery) for ``config``.
    """
    from vllm.v1.engine.input_processor import InputProcessor
    from vllm.v1.engine.output_processor import OutputProcessor

    _settle_engine_figures(config, loaded)
    await _stop_output_handler(engine)
    _finish_leftover_requests(engine.output_processor)

    old_renderer = engine.renderer
    # The tokenizer loads from disk: off the event loop, so other routes keep answering meanwhile.
    renderer = await asyncio.to_thread(build_renderer, config)
    engine.vllm_config = config
    engine.model_config = config.model_config
    engine.scheduler_config = config.scheduler_config
    engine.observability_config = config.observability_config
    engine.renderer = renderer
    engine.input_processor = InputProcessor(config, renderer)
    engine.output_processor = OutputProcessor(
        renderer.tokenizer,
        log_stats=engine.log_stats,
        stream_interval=config.scheduler_config.stream_interval,
        tracing_enabled=config.observability_config.otlp_traces_endpoint is not None,
        admission_stats=getattr(engine, "admission_stats", None),
    )
    engine.engine_core.vllm_config = config
    # Cached on first use; the new model may support other tasks.
    with contextlib.suppress(AttributeError):
        del engine._supported_tasks
    if engine.logger_manager is not None:
        engine.logger_manager = _stat_loggers(engine, config)
    engine._run_output_handler()
    with contextlib.suppress(Exception):  # the old renderer's worker threads; nothing depends on them now
        old_renderer.shutdown()


def _settle_engine_figures(config: Any, loaded: LoadedModel) -> None:
    if loaded.max_model_len is not None:
        config.model_config.max_model_len = min(config.model_config.max_model_len, loaded.max_model_len)
    if loaded.num_gpu_blocks is not None:
        config.cache_config.num_gpu_blocks = loaded.num_gpu_blocks
    if loaded.block_size is not None:
        config.cache_config.block_size = loaded.block_size


async def _stop_output_handler(engine: Any) -> None:
    handler, engine.output_handler = engine.output_handler, None
    if handler is not None and not handler.done():
        handler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await handler


def _finish_leftover_requests(output_processor: Any) -> None:
    """End requests the old output processor still tracks, so no stream waits forever on the old model."""
    leftover = list(output_processor.request_states)
    if leftover:
        logger.warning("ending %d request(s) the engine left behind before the model swap", len(leftover))
        output_processor.abort_requests(leftover, internal=True)


def _stat_loggers(engine: Any, config: Any) -> Any:
    """vLLM's stat loggers label every metric with the model; new ones for the new model."""
    from vllm.v1.metrics.loggers import StatLoggerManager, load_stat_logger_plugin_factories

    manager = StatLoggerManager(
        vllm_config=config,
        engine_idxs=engine.engine_core.engine_ranks_managed,
        custom_stat_loggers=list(load_stat_logger_plugin_factories()),
        client_count=getattr(engine, "_client_count", 1),
    )
    manager.log_engine_initialized()  # type: ignore[no-untyped-call]
    return manager
