"""vLLM's frontend flags on ``turnout serve`` and ``turnout validate``: every one placed, applied or refused."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
from pathlib import Path

import pytest

from server.cli.frontend_flags import (
    MODEL_FLAGS,
    REFUSED,
    SERVER_FLAGS,
    TURNOUT_OPTIONS,
    FrontendFlagError,
    split_frontend_flags,
    wrap_middleware,
)
from server.frontend.settings import FrontendSettings
from server.profiles import CONFIG_ENV
from server.profiles.schema import CHAT_FRONTEND_KEYS, ModelProfile

TABLES = {"turnout": TURNOUT_OPTIONS, "server": SERVER_FLAGS, "model": MODEL_FLAGS, "refused": REFUSED}

#: A tool parser plugin as vLLM documents them: hermes, registered under a new name, that shouts tool names.
PLUGIN = """
from vllm.tool_parsers import ToolParserManager
from vllm.tool_parsers.hermes_tool_parser import Hermes2ProToolParser


@ToolParserManager.register_module("shouting_hermes")
class ShoutingHermes(Hermes2ProToolParser):
    def extract_tool_calls(self, model_output, request):
        info = super().extract_tool_calls(model_output, request)
        for call in info.tool_calls:
            call.function.name = call.function.name.upper()
        return info
"""


def test_every_vllm_frontend_flag_is_in_exactly_one_table() -> None:
    from server.frontend.vllm_frontend_args import frontend_flag_names

    fields = set(frontend_flag_names())
    placed = [name for table in TABLES.values() for name in table]
    assert len(placed) == len(set(placed)), "a flag is in two tables"
    assert fields - set(placed) == set(), "vLLM has frontend flags Turnout has not placed"
    assert set(placed) - fields == set(), "a table names a flag vLLM no longer has"


def test_the_model_flags_are_frontend_settings_and_profile_keys() -> None:
    settings = set(FrontendSettings.__dataclass_fields__)
    assert set(MODEL_FLAGS) <= settings
    assert set(CHAT_FRONTEND_KEYS) <= set(MODEL_FLAGS)
    assert set(CHAT_FRONTEND_KEYS) <= set(ModelProfile.__struct_fields__)


def test_frontend_flags_are_parsed_by_vllm_and_split_by_where_they_apply() -> None:
    from server.frontend.vllm_frontend_args import parse_frontend_flags

    given, rest = parse_frontend_flags(
        [
            *("p.yaml", "--ssl-certfile", "c.pem", "--allowed-origins", '["https://a.example"]', "--max-model-len"),
            *("64", "--response-role", "bot", "--ssl-cert-reqs", "2", "--root-path", "/llm", "--enforce-eager"),
        ]
    )
    assert rest == ["p.yaml", "--max-model-len", "64", "--enforce-eager"]
    flags = split_frontend_flags(given)
    assert flags.model_defaults == {"response_role": "bot"}
    assert flags.uvicorn_options() == {"ssl_certfile": "c.pem", "ssl_cert_reqs": ssl.CERT_REQUIRED, "root_path": "/llm"}
    assert flags.cors() == {
        "allow_origins": ["https://a.example"],
        "allow_methods": ["*"],
        "allow_headers": ["*"],
        "allow_credentials": False,
    }
    assert split_frontend_flags({}).cors() is None


def test_a_refused_flag_says_why() -> None:
    with pytest.raises(
        FrontendFlagError, match="--lora-modules: LoRA adapters belong to one model: set lora_modules in its profile"
    ):
        split_frontend_flags({"lora_modules": ["a=b"], "response_role": "bot"})


def test_middleware_wraps_the_app_class_or_function() -> None:
    app = object()
    wrapped = wrap_middleware(app, ["starlette.middleware.gzip.GZipMiddleware"])
    assert type(wrapped).__name__ == "GZipMiddleware" and wrapped.app is app
    with pytest.raises(FrontendFlagError, match="cannot be imported"):
        wrap_middleware(app, ["no.such.Middleware"])


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    environment = {key: value for key, value in os.environ.items() if key != CONFIG_ENV}
    return subprocess.run(
        [sys.executable, "-m", "server.cli", *args], capture_output=True, text=True, timeout=300, env=environment
    )


def test_serve_refuses_a_flag_that_cannot_apply_before_any_engine(tmp_path: Path) -> None:
    result = _cli("serve", str(tmp_path / "p.yaml"), "--uds", "/tmp/s.sock")
    assert result.returncode == 2 and "--uds: serving on a Unix socket: not implemented" in result.stderr
    assert "Traceback" not in result.stderr


def test_validate_accepts_the_parsers_of_a_tool_parser_plugin(tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    plugin = tmp_path / "shouting.py"
    plugin.write_text(PLUGIN)
    profile = tmp_path / "p.yaml"
    profile.write_text(
        f"models:\n  a:\n    model: {tiny_models['tiny-tools']}\n    enable_auto_tool_choice: true\n"
        "    tool_call_parser: shouting_hermes\n    response_role: bot\n    chat_template_content_format: strin\n"
    )
    without = _cli("validate", str(profile))
    assert without.returncode == 1 and f"{profile}:5:23:" in without.stdout and "shouting_hermes" in without.stdout
    assert f"{profile}:7:35:" in without.stdout  # a per-model frontend key, checked where it stands
    profile.write_text(profile.read_text().replace("strin\n", "string\n"))
    plugged = _cli("validate", str(profile), "--tool-parser-plugin", str(plugin))
    assert plugged.returncode == 0, plugged.stdout + plugged.stderr
    broken = _cli("validate", str(profile), "--tool-parser-plugin", str(tmp_path / "missing.py"))
    assert broken.returncode == 2 and "cannot be loaded" in broken.stderr
