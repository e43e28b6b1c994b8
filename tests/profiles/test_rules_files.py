"""One test (or more) per rule about files a profile points at: chat templates, quant configs, models."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.profiles.conftest import Check, where


def test_chat_template_missing(check: Check, workspace: Path) -> None:
    result = check("models:\n  a:\n    model: models/tiny\n    chat_template: nope.jinja\n")

    assert where(result) == [
        f"4:20: model 'a': chat_template 'nope.jinja' not found: there is no file at {workspace / 'nope.jinja'}"
    ]


def test_chat_template_that_does_not_compile(check: Check, workspace: Path) -> None:
    (workspace / "bad.jinja").write_text("{% for m in messages %}\n{{ m.content }\n")

    result = check("models:\n  a:\n    model: models/tiny\n    chat_template: bad.jinja\n")

    assert where(result) == [
        "4:20: model 'a': chat_template 'bad.jinja' does not compile in jinja2's sandbox: unexpected '}' "
        "(template line 2)"
    ]


def test_chat_template_that_fails_without_tools(check: Check, workspace: Path) -> None:
    (workspace / "raises.jinja").write_text("hello\n{{ raise_exception('no system role, please') }}\n")

    result = check("models:\n  a:\n    model: models/tiny\n    chat_template: raises.jinja\n")

    # Rendering with tools fails the same way; saying so again would add nothing.
    assert result.warnings == []
    assert where(result) == [
        "4:20: model 'a': chat_template 'raises.jinja' fails to render a sample conversation without tools: "
        "the template raised: no system role, please (template line 2)"
    ]


def test_chat_template_that_cannot_render_tools(check: Check, workspace: Path) -> None:
    (workspace / "no-tools.jinja").write_text(
        "{% if tools %}{{ raise_exception('tools are not supported') }}{% endif %}"
        "{% for m in messages %}{{ m.content }}{% endfor %}"
    )
    text = "models:\n  a:\n    model: models/tiny\n    chat_template: no-tools.jinja\n{}"

    tool_model = check(text.format("    tool_call_parser: hermes\n"))
    plain_model = check(text.format(""))

    message = (
        "4:20: model 'a': chat_template 'no-tools.jinja' fails to render a sample conversation with tools: "
        "the template raised: tools are not supported (template line 1)"
    )
    assert where(tool_model) == [message]
    assert (plain_model.errors, where(plain_model, "warning")) == ([], [message])


def test_chat_template_render_type_errors_are_caught(check: Check, workspace: Path) -> None:
    (workspace / "typo.jinja").write_text("{% for m in messages %}{{ m.content + 1 }}{% endfor %}")

    result = check("models:\n  a:\n    model: models/tiny\n    chat_template: typo.jinja\n")

    assert where(result)[0].startswith(
        "4:20: model 'a': chat_template 'typo.jinja' fails to render a sample conversation without tools: TypeError:"
    )


def test_inline_chat_template_is_explained(check: Check) -> None:
    result = check("models:\n  a:\n    model: models/tiny\n    chat_template: '{{ messages }}'\n")

    assert where(result) == [
        "4:20: model 'a': chat_template must be a file path; inline templates are not supported (put the "
        "template in a .jinja file next to the profile)"
    ]


def test_quant_config_missing(check: Check, workspace: Path) -> None:
    result = check("models:\n  a:\n    model: models/tiny\n    quant_config: quant/nope.json\n")

    assert where(result) == [
        f"4:19: model 'a': quant_config 'quant/nope.json' not found: there is no file at "
        f"{workspace / 'quant' / 'nope.json'}"
    ]


def test_quant_config_not_json(check: Check, workspace: Path) -> None:
    (workspace / "quant" / "bad.json").write_text('{\n  "mode": QUANTIZE\n}\n')

    result = check("models:\n  a:\n    model: models/tiny\n    quant_config: quant/bad.json\n")

    assert where(result) == [
        "4:19: model 'a': quant_config 'quant/bad.json' is not JSON: Expecting value "
        f"(line 2, column 11 of {workspace / 'quant' / 'bad.json'})"
    ]


def test_quant_config_must_be_an_object(check: Check, workspace: Path) -> None:
    (workspace / "quant" / "list.json").write_text("[1, 2]")

    result = check("models:\n  a:\n    model: models/tiny\n    quant_config: quant/list.json\n")

    assert where(result) == [
        "4:19: model 'a': quant_config 'quant/list.json' must hold a JSON object (an INC config), not list"
    ]


def test_quant_config_warns_about_what_this_machine_lacks(
    check: Check, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("server.profiles.quant_checks.inc_installed", lambda: False)
    monkeypatch.chdir(workspace)
    (workspace / "quant" / "q.json").write_text('{"mode": "QUANTIZE", "dump_stats_path": "./stats/measure"}')

    result = check("models:\n  a:\n    model: models/tiny\n    quant_config: quant/q.json\n")

    assert result.errors == []
    assert where(result, "warning") == [
        "4:19: model 'a': quant_config 'quant/q.json' needs Intel Neural Compressor (Python module "
        "neural_compressor), which is not installed here; INC fp8 runs on Gaudi (HPU) with vllm-gaudi",
        "4:19: model 'a': quant_config 'quant/q.json' quantizes with measurements from dump_stats_path "
        f"'./stats/measure', but there are none here (no files matching {workspace / 'stats' / 'measure'}*; "
        "INC resolves a relative path against the server's working directory); run INC's MEASURE pass first",
    ]
    (workspace / "stats").mkdir()
    (workspace / "stats" / "measure_hooks_maxabs.json").write_text("{}")
    assert len(check("models:\n  a:\n    model: models/tiny\n    quant_config: quant/q.json\n").warnings) == 1


def test_local_model_path_must_exist(check: Check, workspace: Path) -> None:
    result = check("models:\n  a:\n    model: ./models/nope\n")

    assert where(result) == [
        f"3:12: model 'a': model path './models/nope' does not exist: there is no folder at "
        f"{workspace / 'models' / 'nope'}"
    ]


def test_local_model_folder_needs_config_json(check: Check, workspace: Path) -> None:
    (workspace / "models" / "empty").mkdir()

    result = check("models:\n  a:\n    model: models/empty\n")

    assert where(result) == [
        f"3:12: model 'a': model folder 'models/empty' ({workspace / 'models' / 'empty'}) has no "
        "config.json, so vLLM cannot load it"
    ]


def test_absolute_model_path(check: Check, workspace: Path) -> None:
    result = check(f"models:\n  a:\n    model: {workspace / 'models' / 'tiny'}\n")

    assert result.profile is not None
    assert result.profile.models["a"].model == str(workspace / "models" / "tiny")


def test_model_path_found_only_under_the_working_directory_warns(
    check: Check, workspace: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path_factory.mktemp("cwd")
    (elsewhere / "m").mkdir()
    (elsewhere / "m" / "config.json").write_text("{}")
    monkeypatch.chdir(elsewhere)

    result = check("models:\n  a:\n    model: ./m\n")

    assert result.profile is not None
    assert result.profile.models["a"].model == str(elsewhere / "m")
    assert where(result, "warning") == [
        f"3:12: model 'a': model path './m' was found under the working directory ({elsewhere / 'm'}), not "
        f"under the profile's folder ({workspace}); it only works when the server starts there"
    ]


def test_hub_id_only_warns_that_vllm_downloads_it_at_first_load(check: Check, env: dict[str, str]) -> None:
    result = check("models:\n  a:\n    model: meta-llama/Llama-3.1-8B-Instruct\n")

    cache = env["HF_HUB_CACHE"]
    assert result.errors == []
    assert where(result, "warning") == [
        "3:12: model 'a': 'meta-llama/Llama-3.1-8B-Instruct' is a Hugging Face hub id and is not in the "
        f"local cache (no {cache}/models--meta-llama--Llama-3.1-8B-Instruct/snapshots/*/config.json): vLLM "
        "downloads it when the model first loads, which needs network then and makes that load as slow as the "
        "download, and until then its size is unknown to the memory plan; download it now with "
        "`hf download meta-llama/Llama-3.1-8B-Instruct`, or set model: to a local folder that holds config.json"
    ]
    assert result.profile is not None
    assert result.profile.models["a"].model == "meta-llama/Llama-3.1-8B-Instruct"


def test_hub_id_with_hf_hub_offline_says_vllm_cannot_download_it(check: Check, env: dict[str, str]) -> None:
    env["HF_HUB_OFFLINE"] = "1"
    result = check("models:\n  a:\n    model: Qwen/Qwen3-8B\n")

    [warning] = where(result, "warning")
    assert "and HF_HUB_OFFLINE is set, so vLLM cannot download it and its load will fail" in warning
    assert "(hf download Qwen/Qwen3-8B)" in warning and "huggingface-cli" not in warning


def test_hub_id_in_the_cache_does_not_warn(check: Check, env: dict[str, str]) -> None:
    snapshot = Path(env["HF_HUB_CACHE"]) / "models--Qwen--Qwen3-8B" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")

    result = check("models:\n  a:\n    model: Qwen/Qwen3-8B\n")

    assert (result.errors, result.warnings) == ([], [])


def test_hub_id_that_shadows_a_local_folder_says_so(check: Check, workspace: Path) -> None:
    result = check("models:\n  a:\n    model: models/nope\n")

    assert where(result, "warning")[0].endswith(
        f"(if you meant a local folder: there is none at {workspace / 'models' / 'nope'})"
    )
