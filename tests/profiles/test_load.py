"""Loading valid profiles: resolution, defaults, and vLLM-Gaudi's config format unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from server.profiles import (
    CONFIG_ENV,
    ModelProfile,
    Profile,
    ProfileInvalid,
    Switching,
    load_profile,
    validate_profile,
)
from server.profiles.schema import DEFAULT_API_KEY_ENV
from tests.fakes.parsers import FakeParserRegistry
from tests.fakes.profile_files import VALID_PROFILE, write_profile
from tests.profiles.conftest import Check


def test_valid_profile_resolves_every_part(check: Check, workspace: Path) -> None:
    result = check(VALID_PROFILE)

    assert result.errors == []
    assert result.warnings == []
    profile = result.profile
    assert isinstance(profile, Profile)
    assert profile.path == str(workspace / "profile.yaml")
    assert profile.default_model == "tiny"
    assert list(profile.models) == ["tiny", "other"]
    tiny = profile.models["tiny"]
    assert tiny.model == str(workspace / "models" / "tiny")
    assert tiny.chat_template == str(workspace / "templates" / "tools.jinja")
    assert tiny.quant_config == str(workspace / "quant" / "fp8.json")
    assert tiny.enable_auto_tool_choice is True
    assert (tiny.tool_call_parser, tiny.reasoning_parser) == ("hermes", "qwen3")
    assert tiny.engine_args == {"max_model_len": 512}
    assert profile.models["other"].engine_args == {"dtype": "float32"}
    assert profile.switching == Switching(mode="auto", drain_timeout=5.0, strategy="keep", max_active=2)
    assert profile.server.admin_token_env == "MY_ADMIN_TOKEN"
    assert profile.server.api_key_env == DEFAULT_API_KEY_ENV


def test_quant_config_never_leaks_to_the_next_model(check: Check) -> None:
    # vLLM-Gaudi keeps the previous model's QUANT_CONFIG for a model without one; absent must mean "none".
    profile = check(VALID_PROFILE).profile

    assert profile is not None
    assert profile.models["tiny"].quant_config is not None
    assert profile.models["other"].quant_config is None


def test_engine_arg_values_are_plain_python(check: Check) -> None:
    # ruamel's ScalarFloat/CommentedSeq must not reach vLLM.
    result = check(
        """
        models:
          a:
            model: models/tiny
            gpu_memory_utilization: 0.5
            served_model_name: [a, b]
            hf_overrides: {rope_scaling: {factor: 2.0}}
        """
    )

    assert result.profile is not None
    args = result.profile.models["a"].engine_args
    assert type(args["gpu_memory_utilization"]) is float
    # served_model_name is Turnout's (aliases), not an engine argument, and plain too.
    assert "served_model_name" not in args and type(result.profile.models["a"].served_model_name) is list
    assert type(args["hf_overrides"]) is dict
    assert type(args["hf_overrides"]["rope_scaling"]["factor"]) is float


def test_switching_and_server_default_when_absent(check: Check) -> None:
    profile = check("models: {a: {model: models/tiny}}").profile

    assert profile is not None
    assert profile.switching == Switching()
    assert (profile.switching.drain_timeout, profile.switching.mode) == (60.0, "manual")


def test_auto_mode_scheduler_settings_load(check: Check) -> None:
    text = (
        "models: {a: {model: models/tiny}}\n"
        "switching: {mode: auto, min_residency_s: 0.5, max_residency_s: 30, max_wait_s: 45, max_queue: 8,\n"
        "  failure_backoff_s: 2, max_failure_backoff_s: 20}\n"
    )
    profile = check(text).profile

    assert profile is not None
    switching = profile.switching
    assert (switching.min_residency_s, switching.max_residency_s, switching.max_wait_s) == (0.5, 30.0, 45.0)
    assert (switching.max_queue, switching.failure_backoff_s, switching.max_failure_backoff_s) == (8, 2.0, 20.0)


def test_supervision_settings_load_and_must_be_positive(check: Check) -> None:
    text = (
        "models: {a: {model: models/tiny}}\n"
        "switching: {health_check_interval_s: 2.5, health_check_timeout_s: 4, load_timeout_s: 90}\n"
    )
    profile = check(text).profile

    assert profile is not None
    switching = profile.switching
    assert (switching.health_check_interval_s, switching.health_check_timeout_s, switching.load_timeout_s) == (
        2.5,
        4.0,
        90.0,
    )
    broken = check("models: {a: {model: models/tiny}}\nswitching: {health_check_timeout_s: 0, load_timeout_s: -1}\n")
    assert broken.profile is None
    messages = [issue.message for issue in broken.errors]
    assert any("switching.health_check_timeout_s" in m for m in messages), messages
    assert any("switching.load_timeout_s" in m for m in messages), messages


def test_stream_stall_timeout_loads_and_must_be_positive(check: Check) -> None:
    profile = check("models: {a: {model: models/tiny}}\nserver: {stream_stall_timeout_s: 4.5}\n").profile

    assert profile is not None and profile.server.stream_stall_timeout_s == 4.5
    broken = check("models: {a: {model: models/tiny}}\nserver: {stream_stall_timeout_s: 0}\n")
    assert broken.profile is None
    assert [issue.message for issue in broken.errors] == ["server.stream_stall_timeout_s must be a number > 0, got 0"]


def test_connection_limits_load_with_defaults_and_must_be_positive(check: Check) -> None:
    from server.api import ConnectionLimits

    defaults = check("models: {a: {model: models/tiny}}\n").profile
    assert defaults is not None
    server = defaults.server
    assert (server.header_timeout_s, server.body_timeout_s, server.keep_alive_timeout_s, server.max_connections) == (
        30.0,
        30.0,
        65,
        1024,
    )
    limits = "{header_timeout_s: 2, body_timeout_s: 3, keep_alive_timeout_s: 5, max_connections: 8}"
    text = f"models: {{a: {{model: models/tiny}}}}\nserver: {limits}\n"
    profile = check(text).profile
    assert profile is not None
    assert profile.server.keep_alive_timeout_s == 5
    # The one definition turnout serve's protocol (and Ray's ingress) take the limits from.
    assert ConnectionLimits.of(profile.server) == ConnectionLimits(
        header_timeout_s=2.0, body_timeout_s=3.0, max_connections=8
    )
    broken = check("models: {a: {model: models/tiny}}\nserver: {header_timeout_s: 0, max_connections: 0}\n")
    assert broken.profile is None
    messages = [issue.message for issue in broken.errors]
    assert any("server.header_timeout_s" in m for m in messages) and any(
        "server.max_connections" in m for m in messages
    )
    broken = check("models: {a: {model: models/tiny}}\nserver: {body_timeout_s: -1}\n")
    assert [issue.message for issue in broken.errors] == ["server.body_timeout_s must be a number > 0, got -1"]


def test_request_bounds_are_model_settings_with_defaults(check: Check) -> None:
    profile = check(
        "models: {a: {model: models/tiny}, b: {model: models/tiny, max_n: 4, max_batch_prompts: 16}}"
    ).profile
    assert profile is not None
    a, b = profile.models["a"], profile.models["b"]
    assert (a.max_n, a.max_best_of, a.max_batch_prompts) == (128, 128, 2048)  # n as OpenAI's API bounds it
    assert (b.max_n, b.max_best_of, b.max_batch_prompts, b.engine_args) == (4, 128, 16, {})  # never engine args
    broken = check("models: {a: {model: models/tiny, max_best_of: 0}}")
    assert broken.profile is None and "max_best_of" in broken.errors[0].message


def test_default_model_comes_from_the_file_first(check: Check, env: dict[str, str]) -> None:
    text = "default_model: b\nmodels: {a: {model: models/tiny}, b: {model: models/tiny}}"

    profile = check(text, env={**env, "MODEL": "a"}).profile

    assert profile is not None and profile.default_model == "b"


@pytest.mark.parametrize("default_line", ["", "default_model:\n", "default_model: ''\n"])
def test_default_model_falls_back_to_model_env(check: Check, env: dict[str, str], default_line: str) -> None:
    text = default_line + "models: {a: {model: models/tiny}, b: {model: models/tiny}}"

    profile = check(text, env={**env, "MODEL": "b"}).profile

    assert profile is not None and profile.default_model == "b"


def test_default_model_falls_back_to_the_first_model(check: Check) -> None:
    profile = check("models: {z: {model: models/tiny}, a: {model: models/tiny}}").profile

    assert profile is not None and profile.default_model == "z"


def test_vllm_gaudi_config_loads_unchanged(check: Check, workspace: Path) -> None:
    # The shape vLLM-Gaudi's _load_multi_model_config reads: models mapping, the four frontend keys with
    # nulls allowed, everything else for AsyncEngineArgs, YAML 1.1 booleans (it uses PyYAML).
    result = check(
        """
        default_model: qwen
        models:
          qwen:
            model: models/tiny
            enable_auto_tool_choice: yes
            tool_call_parser: hermes
            chat_template: templates/tools.jinja
            tensor_parallel_size: 1
            enforce_eager: on
          llama:
            model: models/tiny
            tool_call_parser: null
            chat_template: null
            quant_config: null
        """
    )

    assert result.errors == []
    assert result.profile is not None
    qwen = result.profile.models["qwen"]
    assert qwen.enable_auto_tool_choice is True
    assert qwen.engine_args == {"tensor_parallel_size": 1, "enforce_eager": True}
    llama = result.profile.models["llama"]
    assert (llama.tool_call_parser, llama.chat_template, llama.quant_config) == (None, None, None)


def test_quoted_yes_stays_a_string(check: Check) -> None:
    result = check("models: {a: {model: models/tiny, enable_auto_tool_choice: 'yes'}}")

    assert [issue.message for issue in result.errors] == [
        "model 'a': enable_auto_tool_choice must be true or false, got 'yes'"
    ]


def test_json_profile_loads(check: Check) -> None:
    text = json.dumps(
        {"default_model": "a", "models": {"a": {"model": "models/tiny", "max_model_len": 256}}}, indent="\t"
    )

    result = check(text, name="profile.json")

    assert result.errors == []
    assert result.profile is not None
    assert result.profile.models["a"].engine_args == {"max_model_len": 256}


def test_path_none_reads_the_config_env_var(workspace: Path, env: dict[str, str]) -> None:
    path = write_profile(workspace, "models: {a: {model: models/tiny}}")

    profile = load_profile(env={**env, CONFIG_ENV: str(path)}, parsers=FakeParserRegistry())

    assert profile.path == str(path)


def test_path_none_without_the_env_var_is_an_error(env: dict[str, str]) -> None:
    result = validate_profile(env=env)

    assert [str(issue) for issue in result.errors] == [
        "(no profile):1:1: no profile given: name a profile file, for example profiles/demo.yaml"
    ]


def test_load_profile_raises_with_every_error(workspace: Path, env: dict[str, str]) -> None:
    text = "models: {a: {model: ./models/nope}, b: {model: models/tiny, max_len: 1}}"
    path = write_profile(workspace, text)

    with pytest.raises(ProfileInvalid) as caught:
        load_profile(path, env=env, parsers=FakeParserRegistry())

    assert len(caught.value.errors) == 2
    assert str(caught.value).splitlines()[0].startswith(f"{path}:1:")


def test_load_profile_logs_warnings(workspace: Path, env: dict[str, str], caplog: pytest.LogCaptureFixture) -> None:
    path = write_profile(workspace, "models: {a: {model: some-org/some-model}}")

    profile = load_profile(path, env=env, parsers=FakeParserRegistry())

    assert profile.models["a"].model == "some-org/some-model"
    assert "is a Hugging Face hub id" in caplog.text


def test_issues_name_the_file_as_the_caller_did(
    workspace: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    write_profile(workspace, "models: {a: {model: ./models/nope}}")
    monkeypatch.chdir(workspace)

    result = validate_profile("profile.yaml", env=env)

    assert [issue.file for issue in result.errors] == ["profile.yaml"]


def test_profile_structs_are_frozen_and_keyword_only() -> None:
    with pytest.raises(TypeError):
        ModelProfile("/m")  # type: ignore[call-arg]
    model = ModelProfile(model="/m")
    with pytest.raises(AttributeError):
        model.model = "/other"  # type: ignore[misc]


def test_api_keys_load_with_names_and_aliases(check: Check, env: dict[str, str]) -> None:
    text = (
        "models: {a: {model: models/tiny, served_model_name: a-alias}, b: {model: models/tiny}}\n"
        "server:\n"
        "  api_keys:\n"
        "    - {key_env: TEAM_A_KEY, models: [a-alias]}\n"
        "    - {key_env: TEAM_B_KEY, models: [a, b]}\n"
    )
    result = check(text, env={**env, "TEAM_A_KEY": "secret-a"})

    assert result.errors == [] and result.profile is not None
    keys = result.profile.server.api_keys
    assert [(key.key_env, key.models) for key in keys] == [("TEAM_A_KEY", ["a-alias"]), ("TEAM_B_KEY", ["a", "b"])]
    # An unset variable is only a warning here (validate may run where the secrets are not); serve refuses it.
    assert [(w.line, w.col) for w in result.warnings] == [(5, 17)]
    assert "$TEAM_B_KEY is not set" in result.warnings[0].message
