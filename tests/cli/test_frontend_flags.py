"""vLLM's frontend flags on ``turnout serve`` and ``turnout validate``: every one placed, applied or refused."""

from __future__ import annotations

import logging
import os
import ssl
import subprocess
import sys
from pathlib import Path

import pytest

from server.cli.access_log import AccessLogPathFilter
from server.cli.frontend_flags import (
    MODEL_FLAGS,
    REFUSED,
    SERVER_FLAGS,
    TURNOUT_OPTIONS,
    FrontendFlagError,
    FrontendFlags,
    split_frontend_flags,
    wrap_middleware,
)
from server.frontend.settings import FrontendSettings
from server.profiles import CONFIG_ENV
from server.profiles.schema import CHAT_FRONTEND_KEYS, ModelProfile
from tests.cli.in_process import turnout

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
    from server.frontend.vllm_adapter import frontend_flag_names

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
    from server.frontend.vllm_adapter import parse_frontend_flags

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
    assert flags.cors_warnings() == []


def test_only_listed_origins_cross_and_an_explicit_star_is_taken_with_a_warning() -> None:
    from server.frontend.vllm_adapter import parse_frontend_flags

    def flags(*tokens: str) -> FrontendFlags:
        return split_frontend_flags(parse_frontend_flags(list(tokens))[0])

    # Turnout filled the origins with '*' (older vLLM's default) once any CORS flag was given: no longer.
    headers_only = flags("--allowed-headers", '["x-team"]', "--allow-credentials")
    assert headers_only.cors() is None
    (warning,) = headers_only.cors_warnings()
    assert "--allowed-headers, --allow-credentials without --allowed-origins" in warning
    # Given, '*' is taken as vLLM takes it, and warned of.
    star = flags("--allowed-origins", '["*"]')
    assert star.cors() == {
        "allow_origins": ["*"],
        "allow_methods": ["*"],
        "allow_headers": ["*"],
        "allow_credentials": False,
    }
    (warning,) = star.cors_warnings()
    assert "'*'" in warning and "any web site" in warning


def test_the_newer_frontend_flags_are_server_flags_or_model_defaults() -> None:
    from server.frontend.vllm_adapter import parse_frontend_flags

    given, rest = parse_frontend_flags(
        [
            *("--uds", "/tmp/t.sock", "--disable-access-log-for-endpoints", "/health, /metrics,"),
            *("--enable-request-id-headers", "--enable-tokenizer-info-endpoint", "--fingerprint-mode", "custom"),
            *("--fingerprint-value", "fp-1", "--tool-strict-level", "parameter", "--trust-request-mm-kwargs"),
            *("--enable-log-outputs", "--no-enable-log-deltas", "--anthropic-disabled-thinking-effort", "low"),
            *("--no-enable-flash-late-interaction", "--enable-per-request-metrics", "--tool-server", "demo"),
        ]
    )
    assert rest == []
    flags = split_frontend_flags(given)
    assert flags.uvicorn_options() == {"uds": "/tmp/t.sock"}
    assert flags.access_log_exclusions() == {"/health", "/metrics"}
    assert {key: flags.server[key] for key in ("fingerprint_mode", "fingerprint_value")} == {
        "fingerprint_mode": "custom",
        "fingerprint_value": "fp-1",
    }
    settings = FrontendSettings(**flags.model_defaults)
    assert (settings.tool_strict_level, settings.anthropic_disabled_thinking_effort) == ("parameter", "low")
    assert settings.trust_request_mm_kwargs and settings.enable_log_outputs and settings.enable_per_request_metrics
    assert not settings.enable_log_deltas and not settings.enable_flash_late_interaction
    assert settings.tool_server == "demo"


def test_the_access_log_leaves_out_the_excluded_paths_only() -> None:
    keep = AccessLogPathFilter({"/health", "/metrics"})

    def record(path: str) -> logging.LogRecord:
        # uvicorn's access record: (client, method, path with query, HTTP version, status).
        args = ("127.0.0.1:1", "GET", path, "1.1", 200)
        return logging.LogRecord("uvicorn.access", logging.INFO, "h", 1, '%s - "%s %s HTTP/%s" %d', args, None)

    assert not keep.filter(record("/health")) and not keep.filter(record("/metrics?x=1"))
    assert keep.filter(record("/v1/models")) and keep.filter(record("/healthz"))


def test_no_flash_late_interaction_reaches_every_engines_pooler_config() -> None:
    from vllm.config.pooler import PoolerConfig

    from server.cli.serve import engine_defaults

    off = split_frontend_flags({"enable_flash_late_interaction": False})
    assert engine_defaults({}, None, off)["pooler_config"] == {"enable_flash_late_interaction": False}
    given = engine_defaults({"pooler_config": PoolerConfig(pooling_type="MEAN")}, None, off)["pooler_config"]
    assert given.pooling_type == "MEAN" and given.enable_flash_late_interaction is False
    assert "pooler_config" not in engine_defaults({}, None, split_frontend_flags({}))


def test_log_outputs_need_log_requests_as_in_vllm(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from server.cli.serve import serve

    result = CliRunner().invoke(serve, [str(tmp_path / "p.yaml"), "--enable-log-outputs"])
    assert result.exit_code == 2 and "--enable-log-outputs requires --enable-log-requests" in result.output


def test_the_fingerprint_mode_reaches_vllms_serving_objects() -> None:
    from vllm.entrypoints.serve.utils.fingerprint import get_system_fingerprint

    from server.frontend.vllm_adapter import set_fingerprint_mode

    try:
        set_fingerprint_mode("custom", "fp-1")
        assert get_system_fingerprint(None) == "fp-1"
        set_fingerprint_mode("none")
        assert get_system_fingerprint(None) is None
    finally:
        set_fingerprint_mode("full")


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
    result = turnout("serve", str(tmp_path / "p.yaml"), "--grpc-port", "50051")
    assert result.returncode == 2 and "--grpc-port: vLLM's gRPC server of one engine" in result.stderr
    assert "Traceback" not in result.stderr


def test_no_flag_is_refused_for_want_of_implementation_but_the_other_helpers() -> None:
    # Every refusal says why the flag cannot apply; --lora-modules and --sse-keep-alive-interval are other
    # issues' (LoRA, SSE keep-alive).
    assert {key for key, why in REFUSED.items() if "not implemented" in why} <= {
        "lora_modules",
        "sse_keep_alive_interval",
    }


def test_validate_accepts_the_parsers_of_a_tool_parser_plugin(tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    plugin = tmp_path / "shouting.py"
    plugin.write_text(PLUGIN)
    profile = tmp_path / "p.yaml"
    profile.write_text(
        f"models:\n  a:\n    model: {tiny_models['tiny-tools']}\n    enable_auto_tool_choice: true\n"
        "    tool_call_parser: shouting_hermes\n    response_role: bot\n    chat_template_content_format: strin\n"
    )
    without = turnout("validate", str(profile))
    assert without.returncode == 1 and f"{profile}:5:23:" in without.stdout and "shouting_hermes" in without.stdout
    assert f"{profile}:7:35:" in without.stdout  # a per-model frontend key, checked where it stands
    profile.write_text(profile.read_text().replace("strin\n", "string\n"))
    # A subprocess: the plugin's parser stays registered in the process that loads it.
    plugged = _cli("validate", str(profile), "--tool-parser-plugin", str(plugin))
    assert plugged.returncode == 0, plugged.stdout + plugged.stderr
    broken = turnout("validate", str(profile), "--tool-parser-plugin", str(tmp_path / "missing.py"))
    assert broken.returncode == 2 and "cannot be loaded" in broken.stderr
