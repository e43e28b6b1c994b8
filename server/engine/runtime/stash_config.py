"""The multi-model config file vLLM-Gaudi's stash host needs in its environment (``VLLM_HPU_MULTI_MODEL_CONFIG``).

vLLM-Gaudi installs its ``gaudi_reconfigure_engine`` utility on the engine core only when this variable is set:
``register_utils`` in ``vllm_gaudi/__init__.py`` (main, 091bbadd) calls ``install_engine_core_patch``
(``vllm_gaudi/v1/engine/core_patch.py``) under ``if os.environ.get("VLLM_HPU_MULTI_MODEL_CONFIG")``, in every
process its plugin loads in, the spawned engine core included. Without it ``MultiModelAsyncLLM.switch_model``
fails at its first switch (no such utility). The variable names a YAML file, which vLLM-Gaudi's own multi-model
server reads (``_load_multi_model_config`` in ``vllm_gaudi/entrypoints/openai/multi_model_api_server.py``):
``default_model`` and a ``models`` mapping of alias to ``AsyncEngineArgs`` fields plus ``quant_config``. Turnout
writes that file from the profile, so that whatever in vLLM-Gaudi reads it sees the models the host serves.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from server.profiles import CONFIG_ENV
from server.profiles.schema import ModelProfile

__all__ = ["MULTI_MODEL_CONFIG_ENV", "multi_model_config", "set_multi_model_config"]

#: The variable vLLM-Gaudi reads, which is the one the profile loader reads too: one name, the loader's.
MULTI_MODEL_CONFIG_ENV = CONFIG_ENV


def multi_model_config(first: str, models: Mapping[str, ModelProfile]) -> dict[str, Any]:
    """The file's content: vLLM-Gaudi's format, each model's engine arguments and its explicit ``quant_config``."""
    return {
        "default_model": first,
        "models": {
            name: {"model": model.model, **model.engine_args, "quant_config": model.quant_config}
            for name, model in models.items()
        },
    }


def set_multi_model_config(first: str, models: Mapping[str, ModelProfile]) -> Path:
    """Write the config to a new private file and point ``VLLM_HPU_MULTI_MODEL_CONFIG`` at it for the host's
    processes (they inherit the environment); returns the file."""
    handle, name = tempfile.mkstemp(prefix="turnout-multi-model-", suffix=".yaml")
    with os.fdopen(handle, "w", encoding="utf-8") as file:
        YAML(typ="safe", pure=True).dump(multi_model_config(first, models), file)
    os.environ[MULTI_MODEL_CONFIG_ENV] = name
    return Path(name)
