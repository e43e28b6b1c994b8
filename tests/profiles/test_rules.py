"""One test (or more) per structural rule: each error names the right position and says what to do."""

from __future__ import annotations

import pytest

from tests.fakes.parsers import TOOL_PARSERS
from tests.profiles.conftest import Check, where


def test_document_must_be_a_mapping(check: Check) -> None:
    result = check("- a\n- b\n")

    assert where(result) == ["1:1: the profile must be a mapping with a 'models' key, got a list"]


def test_empty_document(check: Check) -> None:
    assert where(check("# nothing\n")) == [
        "1:1: the profile is empty; it needs a 'models' mapping of model name to settings"
    ]


def test_models_is_required_and_non_empty(check: Check) -> None:
    assert where(check("default_model: a\n")) == [
        "1:1: the profile has no 'models' key (a mapping of model name to settings)"
    ]
    assert where(check("models: {}\n")) == ["1:9: models is empty; add at least one model (name: {model: ...})"]
    assert where(check("models: [a]\n")) == ["1:9: models must be a mapping of model name to settings, got a list"]


def test_model_entry_shape(check: Check) -> None:
    result = check(
        """\
        models:
          a: some/path
          b:
            dtype: float32
          1:
            model: models/tiny
        """
    )

    assert where(result) == [
        "2:6: model 'a' must be a mapping with at least a 'model' key, got 'some/path'",
        "3:3: model 'b' has no 'model' key (a local model folder or a hub id)",
        "5:3: a model name must be a non-empty string, got 1",
    ]


def test_wrong_types_and_out_of_range_values(check: Check) -> None:
    result = check(
        """\
        models:
          a:
            model: 42
            enable_auto_tool_choice: maybe
            max_model_len: [1]
        switching:
          mode: fast
          drain_timeout: -1
          strategy: 3
          sleep_level: 3
          max_active: 0
        server:
          api_key_env: not a name
        """
    )

    assert where(result) == [
        "3:12: model 'a': model must be a string, got 42",
        "4:30: model 'a': enable_auto_tool_choice must be true or false, got 'maybe'",
        "5:20: model 'a': engine argument max_model_len must be an integer, got a list "
        "(vLLM's AsyncEngineArgs.max_model_len is int)",
        "7:9: switching.mode must be one of 'auto', 'manual', got 'fast'",
        "8:18: switching.drain_timeout must be a number >= 0, got -1",
        "9:13: switching.strategy must be one of 'auto', 'keep', 'reconfigure', 'sleep', 'stash', 'stop', got 3",
        "10:16: switching.sleep_level must be one of 1, 2, got 3",
        "11:15: switching.max_active must be an integer >= 1, got 0",
        "13:16: server.api_key_env must be an environment variable name, got 'not a name'",
    ]


def test_engine_arg_types_are_checked_as_leniently_as_vllm(check: Check) -> None:
    # pydantic (which vLLM's configs use) accepts "4096" for an int; so must we.
    result = check("models: {a: {model: models/tiny, max_model_len: '4096', enforce_eager: 1}}")

    assert result.errors == []


def test_sections_must_be_mappings(check: Check) -> None:
    result = check("models: {a: {model: models/tiny}}\nswitching: [manual]\nserver: x\n")

    assert where(result) == [
        "2:12: switching must be a mapping, got a list",
        "3:9: server must be a mapping, got 'x'",
    ]


def test_unknown_keys_get_a_did_you_mean(check: Check) -> None:
    result = check(
        """\
        default-model: a
        models:
          a:
            model: models/tiny
            max_modle_len: 5
            tool_parser: hermes
            completely_unrelated: 1
        switching:
          drain_timout: 5
        """
    )

    assert where(result) == [
        "1:1: unknown top-level key 'default-model'; did you mean 'default_model'? "
        "(allowed: default_model, models, switching, server)",
        "5:5: model 'a': unknown key 'max_modle_len': not a model setting nor a field of vLLM's "
        "AsyncEngineArgs; did you mean 'max_model_len'?",
        "6:5: model 'a': unknown key 'tool_parser': not a model setting nor a field of vLLM's "
        "AsyncEngineArgs; did you mean 'tool_call_parser'?",
        "7:5: model 'a': unknown key 'completely_unrelated': not a model setting nor a field of vLLM's AsyncEngineArgs",
        "9:3: unknown key 'drain_timout' in switching; did you mean 'drain_timeout' or 'load_timeout_s'? "
        "(allowed: mode, drain_timeout, strategy, sleep_level, max_active, memory_budget, eviction, min_residency_s, "
        "max_residency_s, max_wait_s, max_queue, failure_backoff_s, max_failure_backoff_s, idle_unload_s, "
        "health_check_interval_s, health_check_timeout_s, load_timeout_s, max_restarts, kv_keep_bytes, verify)",
    ]


def test_without_vllm_engine_args_pass_with_one_warning(check: Check, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("server.profiles.loader.engine_arg_fields", lambda: None)

    result = check("models:\n  a: {model: models/tiny, max_modle_len: 5}\n  b: {model: models/tiny}\n")

    assert result.errors == []
    assert where(result, "warning") == [
        "1:1: vLLM is not installed here, so engine argument names and types are not checked"
    ]
    assert result.profile is not None
    assert result.profile.models["a"].engine_args == {"max_modle_len": 5}


def test_duplicate_keys_are_all_reported_and_checking_goes_on(check: Check) -> None:
    result = check(
        """\
        models:
          a:
            model: models/tiny
            model: models/tiny
          b: {model: models/tiny}
          a: {model: models/tiny}
        switching: {mode: fast}
        """
    )

    assert where(result) == [
        "4:5: duplicate key 'model' (first defined on line 3)",
        "6:3: duplicate key 'a' (first defined on line 2)",
        "7:19: switching.mode must be one of 'auto', 'manual', got 'fast'",
    ]


def test_default_model_must_be_in_the_file(check: Check) -> None:
    result = check("default_model: tinny\nmodels: {tiny: {model: models/tiny}, big: {model: models/tiny}}\n")

    assert where(result) == [
        "1:16: default model 'tinny' (from default_model) is not one of the models; did you mean 'tiny'? "
        "The models are: tiny, big"
    ]


def test_default_model_from_env_must_be_in_the_file(check: Check, env: dict[str, str]) -> None:
    result = check("models: {tiny: {model: models/tiny}}\n", env={**env, "MODEL": "llama"})

    assert where(result) == ["1:1: default model 'llama' (from $MODEL) is not one of the models. The models are: tiny"]


def test_default_model_must_be_a_string(check: Check) -> None:
    assert where(check("default_model: [a]\nmodels: {a: {model: models/tiny}}\n")) == [
        "1:16: default_model must be a model name, got a list"
    ]


def test_auto_tool_choice_needs_a_parser(check: Check) -> None:
    result = check("models:\n  a:\n    model: models/tiny\n    enable_auto_tool_choice: true\n")

    assert where(result) == [
        "4:5: model 'a': enable_auto_tool_choice is true but no tool_call_parser is set; add the tool "
        "parser that matches the model's chat template (for example hermes)"
    ]


def test_the_servers_default_tool_parser_satisfies_auto_tool_choice(check: Check) -> None:
    text = "models:\n  a:\n    model: models/tiny\n    enable_auto_tool_choice: true\n"

    assert where(check(text, default_tool_call_parser="hermes")) == []


def test_the_servers_default_auto_tool_choice_needs_a_parser_for_each_model_that_gets_it(check: Check) -> None:
    text = (
        "models:\n"
        "  a:\n    model: models/tiny\n"
        "  b:\n    model: models/tiny\n    tool_call_parser: hermes\n"
        "  c:\n    model: models/tiny\n    enable_auto_tool_choice: false\n"
    )

    assert where(check(text, default_enable_auto_tool_choice=True)) == [
        "3:5: model 'a': the server's --enable-auto-tool-choice applies but no tool_call_parser is set; add the "
        "tool parser that matches the model's chat template (for example hermes), or pass --tool-call-parser"
    ]
    assert where(check(text, default_enable_auto_tool_choice=True, default_tool_call_parser="hermes")) == []


def test_tool_parser_must_be_registered_and_valid_names_are_listed(check: Check) -> None:
    result = check("models:\n  a:\n    model: models/tiny\n    tool_call_parser: hermess\n")

    assert where(result) == [
        "4:23: model 'a': tool_call_parser 'hermess' is not a tool parser registered in vLLM; did you mean "
        f"'hermes'? Valid names: {', '.join(sorted(TOOL_PARSERS))}"
    ]


def test_reasoning_parser_must_be_registered(check: Check) -> None:
    result = check("models:\n  a:\n    model: models/tiny\n    reasoning_parser: gwen3\n")

    assert where(result) == [
        "4:23: model 'a': reasoning_parser 'gwen3' is not a reasoning parser registered in vLLM; did you "
        "mean 'qwen3'? Valid names: deepseek_r1, qwen3"
    ]


def test_parser_names_are_not_checked_without_a_registry(check: Check) -> None:
    text = "models: {a: {model: models/tiny, tool_call_parser: x, reasoning_parser: y}}"

    result = check(text, parsers=None)

    assert result.errors == []


def test_every_error_is_collected(check: Check) -> None:
    result = check(
        """\
        default_model: x
        models:
          a: {model: ./nope, max_modle_len: 1, enable_auto_tool_choice: true}
          b: {model: models/tiny, chat_template: nope.jinja, quant_config: nope.json}
        switching: {mode: fast, max_active: 0}
        extra: 1
        """
    )

    assert len(result.errors) == 9
    assert result.profile is None


def test_served_model_names_and_the_frontend_keys(check: Check) -> None:
    result = check(
        """\
        models:
          a:
            model: models/tiny
            served_model_name: [a, alias]
          b:
            model: models/tiny
            served_model_name: alias
          c:
            model: models/tiny
            response_role: 3
            chat_template_content_format: strin
        """
    )
    assert where(result) == [
        "7:24: model 'b': served_model_name 'alias' is already the name of model 'a'",
        "10:20: model 'c': response_role must be a string, got 3",
        "11:35: model 'c': chat_template_content_format must be one of 'auto', 'openai', 'string', got 'strin'",
    ]


def test_the_newer_vllm_frontend_keys_are_checked_where_they_stand(check: Check) -> None:
    good = check(
        """\
        models:
          a:
            model: models/tiny
            tool_strict_level: parameter
            trust_request_mm_kwargs: true
            enable_log_deltas: false
            anthropic_disabled_thinking_effort: low
        """
    )
    assert good.errors == [] and good.profile is not None
    model = good.profile.models["a"]
    assert (model.tool_strict_level, model.trust_request_mm_kwargs) == ("parameter", True)
    assert (model.enable_log_deltas, model.anthropic_disabled_thinking_effort) == (False, "low")
    assert model.engine_args == {}  # Turnout's keys, not engine arguments
    bad = check(
        """\
        models:
          a:
            model: models/tiny
            tool_strict_level: strict
            enable_per_request_metrics: maybe
            anthropic_disabled_thinking_effort: huge
        """
    )
    assert [line.split(": ")[0] for line in where(bad)] == ["4:24", "5:33", "6:41"]
    assert "tool_strict_level must be one of 'auto', 'function', 'parameter', got 'strict'" in where(bad)[0]
