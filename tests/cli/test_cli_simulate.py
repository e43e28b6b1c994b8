"""``turnout simulate``: a trace through the profile's models, as a user runs it (a fresh process, another folder,
a fresh HOME), its ``--json`` document in the issue's shape, ``--costs`` from a file, and its errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

FIELDS = {"requests", "switches", "switch_s", "wait_p50_s", "wait_p99_s", "wait_max_s", "refused", "serving_share"}


def _run(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    turnout = Path(sys.executable).parent / "turnout"
    env = {key: value for key, value in os.environ.items() if not key.startswith(("TURNOUT_", "XDG_"))}
    env["HOME"] = str(folder / "home")
    return subprocess.run(
        [str(turnout), "simulate", *args], cwd=folder, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def _workspace(tmp_path: Path, tiny_models: dict[str, Path]) -> Path:
    plain, tools = tiny_models["tiny-plain"], tiny_models["tiny-tools"]
    (tmp_path / "profile.yaml").write_text(
        f"models:\n  dear: {{model: {plain}}}\n  x: {{model: {tools}}}\n  y: {{model: {plain}, priority: 1}}\n"
        "switching: {mode: auto, strategy: keep, max_active: 2}\n"
    )
    rows = [f"{i * 20},{name},100,30" for i, name in enumerate(["dear", "x", "y"] * 6)]
    (tmp_path / "trace.csv").write_text("timestamp,model,prompt_tokens,output_tokens\n" + "\n".join(rows) + "\n")
    costs = {name: {"cold": {"count": 1, "mean_s": cold, "last_s": cold}} for name, cold in [("dear", 30.0)]}
    costs |= {name: {"cold": {"count": 1, "mean_s": 0.5, "last_s": 0.5}} for name in ("x", "y")}
    (tmp_path / "costs.json").write_text(json.dumps({"version": 1, "models": costs}))
    return tmp_path


def test_json_compares_cost_with_lru_in_the_issues_shape(tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    folder = _workspace(tmp_path, tiny_models)
    done = _run(folder, "profile.yaml", "--trace", "trace.csv", "--costs", "costs.json", "--compare", "lru", "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert list(document) == ["policies"] and list(document["policies"]) == ["cost", "lru"]
    for outcome in document["policies"].values():
        assert set(outcome) == {"overall", "models"} and set(outcome["models"]) == {"dear", "x", "y"}
        assert set(outcome["overall"]) == FIELDS and all(set(item) == FIELDS for item in outcome["models"].values())
        assert outcome["overall"]["requests"] == 18
    cost, lru = (document["policies"][name]["overall"] for name in ("cost", "lru"))
    assert cost["switch_s"] < lru["switch_s"]


def test_text_names_the_strongest_change_and_assumed_costs(tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    folder = _workspace(tmp_path, tiny_models)
    done = _run(folder, "profile.yaml", "--trace", "trace.csv")
    assert done.returncode == 0, done.stderr
    assert "policy cost" in done.stdout and "most effect: " in done.stdout
    assert "no measured costs for dear, x, y; assumed cold 10 s" in done.stderr


def test_a_broken_trace_or_costs_file_is_one_line_saying_why(tmp_path: Path, tiny_models: dict[str, Path]) -> None:
    folder = _workspace(tmp_path, tiny_models)
    (folder / "bad.csv").write_text("when,model\n1,a\n")
    done = _run(folder, "profile.yaml", "--trace", "bad.csv")
    assert done.returncode == 1 and "bad.csv:1: the header must be" in done.stderr
    assert "Traceback" not in done.stderr
    (folder / "bad.json").write_text("{}x")
    done = _run(folder, "profile.yaml", "--trace", "trace.csv", "--costs", "bad.json")
    assert done.returncode == 1 and "bad.json: not a reload costs file" in done.stderr
