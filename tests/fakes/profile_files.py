"""A fake profile workspace on disk: a model folder with config.json, a chat template, an INC quant config.

Profile tests write their YAML next to these files, so that every path check has something real to find.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

__all__ = ["TOOLS_TEMPLATE", "VALID_PROFILE", "isolated_env", "make_workspace", "write_profile"]

# A ChatML template that renders tools and tool calls, like the shipped ones, in a few lines.
TOOLS_TEMPLATE = """\
{%- for message in messages %}
{{- '<|' + message.role + '|>' + (message.content or '') }}
{%- for call in message.tool_calls or [] %}{{ call.function | tojson }}{% endfor %}
{%- endfor %}
{%- if tools %}{{ tools | tojson }}{% endif %}
{%- if add_generation_prompt %}<|assistant|>{% endif %}
"""

VALID_PROFILE = """\
default_model: tiny
models:
  tiny:
    model: models/tiny
    max_model_len: 512
    enable_auto_tool_choice: true
    tool_call_parser: hermes
    reasoning_parser: qwen3
    chat_template: templates/tools.jinja
    quant_config: quant/fp8.json
  other:
    model: ./models/tiny
    dtype: float32
switching:
  mode: auto
  drain_timeout: 5
  strategy: keep
  max_active: 2
server:
  admin_token_env: MY_ADMIN_TOKEN
"""


def make_workspace(root: Path) -> Path:
    """Create the support files under ``root`` and return it."""
    model = root / "models" / "tiny"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    (root / "templates").mkdir()
    (root / "templates" / "tools.jinja").write_text(TOOLS_TEMPLATE)
    (root / "quant").mkdir()
    (root / "quant" / "fp8.json").write_text(json.dumps({"mode": "MEASURE", "observer": "maxabs"}))
    return root


def write_profile(root: Path, text: str, name: str = "profile.yaml") -> Path:
    """Write a profile (dedented) into ``root`` and return its path."""
    path = root / name
    path.write_text(textwrap.dedent(text))
    return path


def isolated_env(root: Path) -> dict[str, str]:
    """An environment with an empty Hugging Face cache under ``root`` and no ``MODEL``."""
    return {"HF_HUB_CACHE": str(root / "hf-cache"), "HOME": str(root)}
