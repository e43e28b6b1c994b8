"""Tiny Llama models built locally, for tests and the demo profile.

``build_tiny_models()`` returns ``{"tiny-tools": path, "tiny-plain": path}``, building them on first use into
``.cache/tiny-models`` (or ``$TURNOUT_TINY_MODELS``) and reusing them afterwards. ``tiny-tools`` uses a ChatML
template with hermes-style tools and is trained to answer any prompt that offers tools with
``TOOL_CALL_ANSWER``; ``tiny-plain`` uses a ``[INST]`` template marked ``<<turnout-bracket>>`` and has no tool
support. Run ``python -m server.tinymodels`` to build them and print their folders.
"""

from server.tinymodels.builder import (
    CACHE_ENV,
    STAMP_FILE,
    build_tiny_model,
    build_tiny_models,
    default_cache_dir,
    is_built,
)
from server.tinymodels.spec import (
    SPECS,
    TEMPLATES_DIR,
    TINY_PLAIN,
    TINY_TOOLS,
    TOOL_CALL_ANSWER,
    WEATHER_TOOL,
    TinyModelSpec,
)

__all__ = [
    "CACHE_ENV",
    "SPECS",
    "STAMP_FILE",
    "TEMPLATES_DIR",
    "TINY_PLAIN",
    "TINY_TOOLS",
    "TOOL_CALL_ANSWER",
    "WEATHER_TOOL",
    "TinyModelSpec",
    "build_tiny_model",
    "build_tiny_models",
    "default_cache_dir",
    "is_built",
]
