"""``VLLM_ALLOW_INSECURE_SERIALIZATION=1`` for the life of vLLM-Gaudi's stash host, and for nothing else.

vLLM refuses pickles on its engine channels unless this variable is ``1``. vLLM-Gaudi's reconfigure needs it in
the host's engine core: ``gaudi_reconfigure_engine`` (``vllm_gaudi/v1/engine/core_patch.py``) unpickles the
target's ``VllmConfig`` and raises without it, and the core's workers get the config the same way; they inherit it
from the core, which is spawned with a copy of this process's environment. This process needs it too, for as long
as that core runs: a core with the variable set sends every typed utility result (the reconfigure's memory
figures included) with its type information, which vLLM's decoder here refuses without it
(``_decode_utility_result`` in vLLM 0.32's ``vllm/v1/serial_utils.py``). So "only in the engine process" cannot be
had from this vLLM without patching it; what is had: the variable is set just before the host's engine core is
spawned and removed when the host is shut down (or fails to start), so it is never on for a server that runs no
stash host, and no engine started outside the host's life inherits it.

Verified only against the fake host (``tests/fakes/stash.py``): ``vllm_gaudi`` needs Gaudi, and vLLM's sleep mode,
which the reconfigure uses, is refused on CPU.
"""

from __future__ import annotations

import os
from typing import Any, Final

from server.engine.types import StashHost

__all__ = ["INSECURE_SERIALIZATION_ENV", "SerializingHost", "allow_insecure_serialization", "start_serializing"]

#: vLLM refuses pickled payloads on its engine channels unless this is "1"; vLLM-Gaudi's reconfigure needs them.
INSECURE_SERIALIZATION_ENV: Final = "VLLM_ALLOW_INSECURE_SERIALIZATION"


def allow_insecure_serialization() -> str | None:
    """Set the variable to ``1`` in this process (so in the processes it spawns from now on); returns its value
    before, for :func:`_restore`."""
    before = os.environ.get(INSECURE_SERIALIZATION_ENV)
    os.environ[INSECURE_SERIALIZATION_ENV] = "1"
    return before


def _restore(before: str | None) -> None:
    if before is None:
        os.environ.pop(INSECURE_SERIALIZATION_ENV, None)
    else:
        os.environ[INSECURE_SERIALIZATION_ENV] = before


class SerializingHost:
    """A started stash host; shutting it down takes the variable back (:func:`allow_insecure_serialization`).

    Args:
        host: vLLM-Gaudi's ``MultiModelAsyncLLM``, initialized while the variable was set.
        before: The variable's value before it was set.
    """

    def __init__(self, host: StashHost, before: str | None) -> None:
        self._host = host
        self._before = before

    @property
    def engine(self) -> Any:
        """The host's engine."""
        return self._host.engine

    @property
    def current_model(self) -> str | None:
        """The model the host says it holds."""
        return self._host.current_model

    async def switch_model(self, model: str, drain_timeout: int = 60) -> Any:
        """The host's ``switch_model``."""
        return await self._host.switch_model(model, drain_timeout=drain_timeout)

    def shutdown(self) -> None:
        """Stop the host, then remove the variable (its processes are gone: nothing needs it)."""
        try:
            self._host.shutdown()
        finally:
            _restore(self._before)


async def start_serializing(host: Any, first: str) -> SerializingHost:
    """``host.initialize(first)`` with the variable set, kept while the host lives; removed if it fails."""
    before = allow_insecure_serialization()
    try:
        await host.initialize(first)
    except BaseException:
        _restore(before)
        raise
    return SerializingHost(host, before)
