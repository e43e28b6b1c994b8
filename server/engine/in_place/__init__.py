"""The Turnout side of an in-place model swap: drive it through the engine core's utilities (``swap``), check
which model the engine core then reports, and refresh ``AsyncLLM``'s own model state (``frontend_state``).

The utilities themselves run inside vLLM's processes: ``server/vllm_plugin``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from server.engine.faces import lazy_face

if TYPE_CHECKING:
    from server.engine.in_place.frontend_state import RendererFactory
    from server.engine.in_place.swap import InPlaceSwap, LoadOutcome, PluginMissing
else:
    __getattr__ = lazy_face(__name__, __file__)

__all__ = [
    "InPlaceSwap",
    "LoadOutcome",
    "PluginMissing",
    "RendererFactory",
]
