"""The common part of the strategies whose engines each belong to one slot (``stop``, ``keep``, ``sleep``).

The contracts every strategy meets (:class:`~server.engine.types.SwitchStrategy` and the engines it loads) are
plain protocols in ``server.engine.types``, which the model slots' owner reads as well.
"""

from __future__ import annotations

from typing import Any, ClassVar

from server.engine.types import Capabilities, EngineLoader

__all__ = ["LoaderStrategy"]


class LoaderStrategy:
    """The common part of the strategies whose engines each belong to one slot (``stop``, ``keep``, ``sleep``)."""

    name = ""
    capabilities: ClassVar[Capabilities] = Capabilities()

    def __init__(self, loader: EngineLoader) -> None:
        self._loader = loader

    async def unload(self, name: str, engine: Any) -> None:
        if engine is not None:
            await self._loader.unload(engine)

    async def close(self) -> None:
        pass  # every engine belongs to a slot, and the slots are released first
