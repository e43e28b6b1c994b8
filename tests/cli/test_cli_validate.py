"""``turnout validate``: exit codes, both output formats, the shipped example, and the real vLLM registry."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from server.cli.main import main
from server.cli.validate import OutputFormat, cli_parser_registry, run_validate
from server.profiles import CONFIG_ENV
from tests.fakes.parsers import FakeParserRegistry
from tests.fakes.profile_files import VALID_PROFILE, write_profile

REPO = Path(__file__).resolve().parents[2]
ISSUE_LINE = re.compile(r"^.+:\d+:\d+: (error|warning): .+$")


def run(files: list[str], env: dict[str, str], output_format: OutputFormat = "text") -> tuple[int, str]:
    out = io.StringIO()
    code = run_validate(files, output_format=output_format, env=env, parsers=FakeParserRegistry(), out=out)
    return code, out.getvalue()


def test_valid_profile_exits_0_with_one_summary_line_per_model(
    workspace: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(workspace)
    write_profile(workspace, VALID_PROFILE)

    code, output = run(["profile.yaml"], env)

    assert code == 0
    assert output.splitlines() == [
        "profile.yaml: model 'tiny' (default) -> models/tiny (tool parser hermes, auto tool choice on, "
        "reasoning parser qwen3, template templates/tools.jinja, quant quant/fp8.json)",
        "profile.yaml: model 'other' -> models/tiny (tool parser none, auto tool choice off, "
        "reasoning parser none, template from the model, quant none)",
    ]


def test_invalid_profile_exits_1_with_every_error(workspace: Path, env: dict[str, str]) -> None:
    path = write_profile(workspace, "models:\n  a: {model: ./nope, max_modle_len: 1}\nswitching: {mode: x}\n")

    code, output = run([str(path)], env)

    assert code == 1
    lines = output.splitlines()
    assert len(lines) == 3
    assert all(ISSUE_LINE.match(line) for line in lines)
    assert lines[0].startswith(f"{path}:2:14: error: model 'a': model path './nope' does not exist")
    assert lines[2] == f"{path}:3:19: error: switching.mode must be one of 'auto', 'manual', got 'x'"


def test_warnings_do_not_fail(workspace: Path, env: dict[str, str]) -> None:
    path = write_profile(workspace, "models:\n  a: {model: org/model}\n")

    code, output = run([str(path)], env)

    assert code == 0
    warning, summary = output.splitlines()
    assert warning.startswith(f"{path}:2:14: warning: model 'a': 'org/model' is a Hugging Face hub id")
    assert summary.startswith(f"{path}: model 'a' (default) -> org/model (")


def test_every_file_is_reported_and_one_bad_file_fails_the_run(workspace: Path, env: dict[str, str]) -> None:
    good = write_profile(workspace, "models: {a: {model: models/tiny}}", "good.yaml")
    bad = write_profile(workspace, "models: {}", "bad.yaml")

    code, output = run([str(good), str(bad), str(workspace / "missing.yaml")], env)

    assert code == 1
    assert [line.split(": ")[0] for line in output.splitlines()] == [
        str(good),
        f"{bad}:1:9",
        f"{workspace / 'missing.yaml'}:1:1",
    ]


def test_json_format(workspace: Path, env: dict[str, str]) -> None:
    good = write_profile(workspace, "models: {a: {model: models/tiny}}", "good.yaml")
    bad = write_profile(workspace, "models: {a: {model: models/tiny, dtype: [x]}}\nextra: 1\n", "bad.yaml")

    code, output = run([str(good), str(bad)], env, output_format="json")

    assert code == 1
    document = json.loads(output)
    assert document["ok"] is False
    first, second = document["files"]
    assert (first["ok"], first["errors"], [model["name"] for model in first["models"]]) == (True, [], ["a"])
    assert first["models"][0]["default"] is True
    assert second["ok"] is False
    assert second["models"] == []
    assert second["errors"] == [
        {
            "file": str(bad),
            "line": 2,
            "col": 1,
            "message": "unknown top-level key 'extra' (allowed: default_model, models, switching, server)",
            "severity": "error",
        }
    ]


def test_without_a_registry_each_file_says_parsers_are_unchecked(workspace: Path, env: dict[str, str]) -> None:
    path = write_profile(workspace, "models: {a: {model: models/tiny, tool_call_parser: anything}}")
    out = io.StringIO()

    code = run_validate([str(path)], env=env, parsers=None, out=out)

    assert code == 0
    assert out.getvalue().splitlines()[0] == (
        f"{path}:1:1: warning: vLLM is not installed here, so tool and reasoning parser names are not checked"
    )


def test_an_internal_error_is_a_positioned_error_line_not_a_traceback(
    workspace: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def explode(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr("server.cli.validate.validate_profile", explode)

    code, output = run(["x.yaml"], env)

    assert (code, output) == (1, "x.yaml:1:1: error: internal error: RuntimeError: boom\n")


def test_the_shipped_gaudi_example_explains_what_this_machine_lacks(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    monkeypatch.setattr("server.profiles.quant_checks.inc_installed", lambda: False)

    code, output = run(["profiles/gaudi-example.yaml"], env)

    assert code == 0
    lines = output.splitlines()
    assert [line.split(": warning: ")[0] for line in lines[:4]] == [
        "profiles/gaudi-example.yaml:14:12",
        "profiles/gaudi-example.yaml:17:19",
        "profiles/gaudi-example.yaml:17:19",
        "profiles/gaudi-example.yaml:27:12",
    ]
    assert "'meta-llama/Llama-3.1-8B-Instruct' is a Hugging Face hub id" in lines[0]
    assert "needs Intel Neural Compressor" in lines[1]
    assert "run INC's MEASURE pass first" in lines[2]
    assert "'Qwen/Qwen3-8B' is a Hugging Face hub id" in lines[3]
    assert lines[4:] == [
        "profiles/gaudi-example.yaml: model 'llama-3.1-8b' (default) -> meta-llama/Llama-3.1-8B-Instruct "
        "(tool parser llama3_json, auto tool choice on, reasoning parser none, "
        "template templates/llama31-json-tools.jinja, quant profiles/quant/inc-fp8-llama31-8b.json)",
        "profiles/gaudi-example.yaml: model 'qwen3-8b' -> Qwen/Qwen3-8B (tool parser hermes, auto tool "
        "choice on, reasoning parser qwen3, template templates/qwen3-hermes-tools.jinja, quant none)",
    ]


def test_click_command_without_file_or_env_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CONFIG_ENV, raising=False)

    result = CliRunner().invoke(main, ["validate"])

    assert result.exit_code == 2
    assert "no profile given: name one, for example `turnout validate profiles/demo.yaml`" in result.output
    assert CONFIG_ENV not in result.output  # a vLLM-Gaudi variable means nothing to a new user


def test_click_command_reads_the_env_var(workspace: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_profile(workspace, "models: {a: {model: ./nope}}")
    monkeypatch.setenv(CONFIG_ENV, str(path))
    monkeypatch.setattr("server.cli.validate.cli_parser_registry", lambda **_: FakeParserRegistry())

    result = CliRunner().invoke(main, ["validate"], env=env)

    assert result.exit_code == 1
    assert result.output.startswith(f"{path}:1:21: error: model 'a': model path './nope' does not exist")


def test_click_command_rejects_an_unknown_format() -> None:
    result = CliRunner().invoke(main, ["validate", "--format", "xml", "x.yaml"])

    assert result.exit_code == 2


def test_registry_falls_back_to_vllms_source_when_the_adapter_cannot_import(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "server.frontend.vllm_adapter", None)  # makes the import fail

    registry = cli_parser_registry(import_vllm=True)

    assert registry is not None
    assert {"hermes", "llama3_json"} <= set(registry.tool_parsers())
    assert "qwen3" in registry.reasoning_parsers()
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "parser names come from vLLM's source instead" in captured.err


def test_console_script_against_the_real_vllm_registry(tmp_path: Path) -> None:
    # The one test with vLLM's real parser registry (importing it takes seconds): the example's parser names
    # are registered, a misspelt one is not, and nothing vLLM prints while importing reaches stdout's JSON.
    bad = write_profile(tmp_path, "models:\n  a:\n    model: org/model\n    tool_call_parser: hermess\n")
    turnout = Path(sys.executable).parent / "turnout"
    example = REPO / "profiles" / "gaudi-example.yaml"
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hf")}

    done = subprocess.run(
        [str(turnout), "validate", "--import-vllm", "--format", "json", str(example), str(bad)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )

    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    example_report, bad_report = json.loads(done.stdout)["files"]
    assert (example_report["ok"], example_report["errors"]) == (True, [])
    [error] = bad_report["errors"]
    assert error["line"] == 4
    assert "did you mean 'hermes'?" in error["message"]
    assert "llama3_json" in error["message"]


def test_the_source_tables_list_exactly_vllms_registered_parsers() -> None:
    # The fast default reads vLLM's registration tables; they must agree with the live registries.
    from server.frontend.vllm_adapter import parser_registry

    fast, live = cli_parser_registry(), parser_registry()
    assert fast is not None
    assert set(fast.tool_parsers()) == set(live.tool_parsers())
    assert set(fast.reasoning_parsers()) == set(live.reasoning_parsers())


def test_validate_is_fast_by_default_and_imports_no_vllm(tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    # tiny_models: the demo profile names their folders, which must exist for it to validate.
    code = (
        "import sys; from click.testing import CliRunner; from server.cli.main import main; "
        f"r = CliRunner().invoke(main, ['validate', {str(REPO / 'profiles' / 'demo.yaml')!r}]); "
        "print(r.exit_code, 'vllm' in sys.modules, 'torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.stdout.split() == ["0", "False", "False"], done.stderr


def test_validate_plan_prints_footprints_and_what_fits_without_importing_vllm(
    tmp_path: Path, tiny_models: dict[str, Path]
) -> None:
    # The demo's models under a 2.5 GiB budget: each is 1 GiB of engine, 16 MiB of KV cache and its weights.
    models = "".join(
        f"  {name}:\n    model: {folder}\n    kv_cache_memory_bytes: 16777216\n"
        for name, folder in sorted(tiny_models.items())
    )
    profile = tmp_path / "plan.yaml"
    profile.write_text(f"models:\n{models}switching:\n  memory_budget: 2.5GiB\n")
    code = (
        "import sys; from click.testing import CliRunner; from server.cli.main import main; "
        f"r = CliRunner().invoke(main, ['validate', '--plan', {str(profile)!r}]); "
        "print(r.output); print(r.exit_code, 'vllm' in sys.modules, 'torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    *output, last = done.stdout.strip().splitlines()
    assert last.split() == ["0", "False", "False"], done.stderr
    text = "\n".join(output)
    weights = (tiny_models["tiny-plain"] / "model.safetensors").stat().st_size
    assert f"{profile}: plan: cpu, strategy keep;" in text and "memory budget 2.5 GiB" in text
    assert (
        f"  tiny-plain: 1.0 GiB = weights {weights / 2**20:.1f} MiB + KV cache 16.0 MiB (its kv_cache_memory_bytes) "
        "+ engine 1.0 GiB" in text
    )
    assert "resident together (largest sets that fit):\n" in text and "tiny-plain, tiny-tools" in text


def test_a_model_larger_than_a_size_budget_is_an_error_at_its_key(tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    # 2048 x 1024 tokens x 1 KiB (2 layers, 1 KV head of 64, float32) = 2 GiB of KV cache, past a 2.5 GiB budget.
    profile = tmp_path / "plan.yaml"
    profile.write_text(
        f"models:\n  big:\n    model: {tiny_models['tiny-plain']}\n    max_model_len: 2048\n"
        "    max_num_seqs: 1024\nswitching:\n  memory_budget: 2.5GiB\n"
    )
    out = io.StringIO()
    assert run_validate([str(profile)], parsers=None, out=out, plan=True) == 1
    assert f"{profile}:2:3: error: model 'big' needs 3.0 GiB (weights 1.4 MiB, KV cache 2.0 GiB, engine 1.0 GiB)" in (
        out.getvalue()
    )
    assert "plan:" not in out.getvalue()


def test_validate_plan_as_json(tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    profile = tmp_path / "plan.yaml"
    profile.write_text(
        "models:\n"
        + "".join(f"  {name}:\n    model: {folder}\n" for name, folder in sorted(tiny_models.items()))
        + "switching:\n  memory_budget: 3GiB\n  max_active: 1\n"
    )
    out = io.StringIO()
    assert run_validate([str(profile)], output_format="json", parsers=None, out=out, plan=True) == 0
    plan = json.loads(out.getvalue())["files"][0]["plan"]
    assert plan["budget_bytes"] == 3 * 2**30 and plan["strategy"] == "keep"
    assert [item["model"] for item in plan["footprints"]] == ["tiny-plain", "tiny-tools"]
    first = plan["footprints"][0]
    assert first["total_bytes"] == first["weight_bytes"] + first["kv_cache_bytes"] + first["overhead_bytes"]
    assert sorted(plan["outlook"]["largest_sets"]) == [["tiny-plain"], ["tiny-tools"]]  # max_active 1 caps them


def test_validate_without_plan_leaves_the_json_as_it_was(workspace: Path, env: dict[str, str]) -> None:
    path = write_profile(workspace, VALID_PROFILE)
    code, output = run([str(path)], env, "json")
    assert code == 0 and "plan" not in json.loads(output)["files"][0]


def test_validate_plan_says_which_footprints_are_unknown(tmp_path: Path) -> None:
    profile = tmp_path / "hub.yaml"
    profile.write_text("models:\n  remote:\n    model: org/absent\nswitching:\n  memory_budget: 8GiB\n")
    out = io.StringIO()
    env = {"HF_HUB_CACHE": str(tmp_path / "cache"), "HOME": str(tmp_path)}
    assert run_validate([str(profile)], env=env, parsers=None, out=out, plan=True) == 0
    text = out.getvalue()
    assert (
        "remote: footprint unknown (model 'remote': 'org/absent' is neither a local folder nor in the local cache)"
        in (text)
    )
    assert "models of unknown footprint not counted" in text and "no model's footprint is known here" in text
