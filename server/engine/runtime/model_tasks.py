"""What each configured model can serve, known before its engine starts: vLLM's generation tasks of the model.

A route that a model's tasks lack must be refused before its request is admitted: admission may switch the
device to the model (auto mode), and only the loaded bundle would then say the model cannot serve the route. So
the manager reads each model's tasks from its resolved vLLM config (no engine), once per model profile, off the
event loop; a reload that changes a model reads them again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

from server.profiles.schema import ModelProfile

__all__ = ["ModelTasks", "TaskReader", "generation_tasks"]

logger = logging.getLogger("turnout.engine")

#: Reads a model's generation tasks (None: they cannot be known before it loads).
TaskReader = Callable[[str, ModelProfile], frozenset[str] | None]


def generation_tasks(name: str, model: ModelProfile) -> frozenset[str] | None:
    """The generation tasks vLLM's model runner will report for ``model`` (``generate``, ``transcription``),
    read from its resolved config as ``get_supported_generation_tasks`` decides them; empty for a pooling model;
    None when the config cannot be read (the loaded bundle then decides, as before)."""
    from server.engine.runtime.vllm_loader import build_engine_args

    try:
        config = build_engine_args(name, model).create_model_config()
    except Exception as exc:  # the profile was checked at start-up; a model that changed since loads and fails
        logger.warning("model %r: its tasks cannot be read before it loads (%s)", name, exc)
        return None
    if config.runner_type != "generate":
        return frozenset()
    registry, architectures = config.registry, config.architectures
    if registry.is_transcription_only_model(architectures, config):
        return frozenset({"transcription"})
    tasks = {"generate"} if registry.is_text_generation_model(architectures, config) else set()
    if registry.is_transcription_model(architectures, config):
        tasks.add("transcription")
    return frozenset(tasks)


class ModelTasks:
    """Each model's tasks, read once per model profile by ``reader`` (None: never known before a load).

    Args:
        models: The configured models, read at each call (a reload replaces them).
        reader: Reads one model's tasks (blocking: it runs in a thread).
    """

    def __init__(self, models: Callable[[], Mapping[str, ModelProfile]], reader: TaskReader | None) -> None:
        self._models = models
        self._reader = reader
        self._known: dict[str, tuple[ModelProfile, frozenset[str] | None]] = {}

    async def of(self, name: str) -> frozenset[str] | None:
        """``name``'s tasks; None for a model not configured, or whose tasks cannot be known before it loads."""
        model = self._models().get(name)
        if model is None or self._reader is None:
            return None
        known = self._known.get(name)
        if known is not None and known[0] is model:
            return known[1]
        tasks = await asyncio.to_thread(self._reader, name, model)
        self._known[name] = (model, tasks)
        return tasks
