"""``turnout serve``'s command line: the profile (or ``$VLLM_HPU_MULTI_MODEL_CONFIG``), vLLM's engine flags, and
the checks that refuse to start before any engine does."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

from server.profiles import CONFIG_ENV
from tests.cli.in_process import Ran, turnout


def test_serve_refuses_an_invalid_profile_with_every_error(tmp_path: Path) -> None:
    profile = tmp_path / "bad.yaml"
    profile.write_text("models:\n  a:\n    model: ./missing\n    max_modle_len: 5\n  b: 3\n")
    result = subprocess.run(
        [sys.executable, "-m", "server.cli", "serve", str(profile), "--port", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert f"{profile}:3:12: error:" in result.stderr
    assert f"{profile}:4:5: error:" in result.stderr and "max_model_len" in result.stderr
    assert f"{profile}:5:6: error:" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert "3 error(s); not starting" in result.stderr


def _serve(*args: str, env: dict[str, str] | None = None) -> Ran:
    return turnout("serve", *args, env=env)


def test_without_a_profile_argument_serve_reads_the_seeds_env_var(tmp_path: Path) -> None:
    profile = tmp_path / "from-env.yaml"
    profile.write_text("models:\n  a:\n    model: ./missing\n")
    result = _serve("--port", "1", env={CONFIG_ENV: str(profile)})
    assert result.returncode == 1
    assert f"{profile}:3:12: error: model 'a': model path './missing' does not exist" in result.stderr
    missing = _serve("--port", "1")
    assert missing.returncode == 2 and f"Give a PROFILE file or set {CONFIG_ENV}." in missing.stderr


def test_a_refused_profile_stops_serve_and_ray_serve_before_vllm_is_imported(tmp_path: Path) -> None:
    # Without vLLM flags nothing needs vLLM before the profile is read: a refused profile fails in milliseconds.
    profile = tmp_path / "bad.yaml"
    profile.write_text("models:\n  a:\n    model: ./missing\n")
    code = (
        "import sys; from click.testing import CliRunner; from server.cli.main import main; "
        f"s = CliRunner().invoke(main, ['serve', {str(profile)!r}, '--port', '1']); "
        f"r = CliRunner().invoke(main, ['ray-serve', {str(profile)!r}]); "
        "print(s.exit_code, r.exit_code, 'vllm' in sys.modules, 'torch' in sys.modules); "
        "print(s.output + r.output, file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.stdout.split() == ["1", "1", "False", "False"], done.stderr
    assert done.stderr.count(f"{profile}:3:12: error: model 'a': model path './missing' does not exist") == 2


def test_an_unknown_flag_is_a_usage_error_naming_the_closest_flag(tmp_path: Path) -> None:
    result = _serve(str(tmp_path / "p.yaml"), "--max-model-lenn", "5", "--prot", "1")
    assert result.returncode == 2
    assert "unknown option --max-model-lenn; did you mean '--max-model-len'" in result.stderr
    assert "unknown option --prot; did you mean '--port'" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_engine_flag_is_every_models_default_and_a_bad_one_fails_before_any_engine(
    tiny_models: dict[str, Path], tmp_path: Path
) -> None:
    profile = tmp_path / "two.yaml"
    profile.write_text(
        f"models:\n  tools:\n    model: {tiny_models['tiny-tools']}\n    max_model_len: 1024\n"
        f"  plain:\n    model: {tiny_models['tiny-plain']}\n"
    )
    # tools overrides the flag with its own key; plain takes it, and the tiny model allows only 2048 tokens.
    result = _serve(str(profile), "--max-model-len", "99999", "--dtype", "float32", "--port", "1")
    assert result.returncode == 1, result.stderr[-2000:]
    assert f"{profile}: error: model 'plain': engine argument max_model_len=99999: " in result.stderr
    assert "model 'tools'" not in result.stderr
    assert "vLLM refused the engine arguments; not starting." in result.stderr
    assert "Loading" not in result.stderr + result.stdout  # no engine was started


def test_an_unset_scoped_key_variable_stops_serve_before_any_engine(
    tiny_models: dict[str, Path], tmp_path: Path
) -> None:
    profile = tmp_path / "keys.yaml"
    profile.write_text(
        f"models:\n  tools:\n    model: {tiny_models['tiny-tools']}\n"
        "server:\n  api_keys:\n    - {key_env: T18_UNSET_KEY, models: [tools]}\n"
    )
    result = _serve(str(profile), "--port", "1", env={"T18_UNSET_KEY": ""})
    assert result.returncode == 1, result.stderr[-2000:]
    # One line, whatever the length of the temporary path: no hard wrap at 80 columns when stderr is a pipe.
    expected = f"{profile}: error: server.api_keys[0].key_env: the environment variable T18_UNSET_KEY is not set"
    assert any(line.startswith(expected) for line in result.stderr.splitlines()), result.stderr[-2000:]
    assert "Traceback" not in result.stderr and "Loading" not in result.stderr + result.stdout


def test_no_preload_turns_every_preload_off_and_keeps_the_rest() -> None:
    from server.api import without_preloads as _without_preloads
    from server.profiles.schema import ModelProfile, Profile

    models = {
        "a": ModelProfile(model="/m/a"),
        "b": ModelProfile(model="/m/b", preload=True, pinned=True),
    }
    profile = Profile(path="/p.yaml", default_model="a", models=models)
    loaded = _without_preloads(profile)
    assert [model.preload for model in loaded.models.values()] == [False, False]
    assert loaded.models["b"].pinned and loaded.models["b"].model == "/m/b"
    assert profile.models["b"].preload  # the original is untouched


def test_a_taken_port_stops_serve_in_one_line_before_any_engine(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    profile = tmp_path / "port.yaml"
    profile.write_text(f"models:\n  tools:\n    model: {tiny_models['tiny-tools']}\n")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _serve(str(profile), "--port", str(port))
    assert result.returncode == 1, result.stderr[-2000:]
    expected = f"error: cannot listen on 127.0.0.1:{port}: Address already in use; not starting."
    assert expected in result.stderr.splitlines(), result.stderr[-2000:]
    assert "Traceback" not in result.stderr and "loading" not in (result.stderr + result.stdout).lower()


#: The bound on an early refusal: about 1 s here on a loaded 2-core machine, so generous for a loaded CI one; the
#: checks ran after vLLM's import before (10-20 s here), which fails it (and so does the sys.modules check below).
_EARLY_S = 5.0


def _timed_serve(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "server.cli", "serve", *args], capture_output=True, text=True, timeout=120, check=False
    )
    return result, time.monotonic() - start


def test_a_taken_port_and_an_unknown_flag_stop_serve_before_vllm_is_imported(
    tiny_models: dict[str, Path], tmp_path: Path
) -> None:
    profile = tmp_path / "early.yaml"
    profile.write_text(f"models:\n  tools:\n    model: {tiny_models['tiny-tools']}\n")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy, busy_s = _timed_serve(str(profile), "--dtype", "float32", "--port", str(port))
    assert busy.returncode == 1, busy.stderr[-2000:]
    expected = f"error: cannot listen on 127.0.0.1:{port}: Address already in use; not starting."
    assert busy.stderr.splitlines() == [expected]
    assert busy_s < _EARLY_S, busy_s
    typo, typo_s = _timed_serve(str(profile), "--max_model_lenn=5", "--enforce-eager", "--no-enable-prefix-caching")
    assert typo.returncode == 2, typo.stderr[-2000:]
    assert "unknown option --max-model-lenn; did you mean '--max-model-len'" in typo.stderr
    assert "Traceback" not in typo.stderr and "enforce" not in typo.stderr and "prefix" not in typo.stderr
    assert typo_s < _EARLY_S, typo_s


def test_the_early_refusals_import_neither_vllm_nor_torch(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    # The same refusals in one process: what a fast machine's import time could hide, sys.modules shows.
    bad, good = tmp_path / "bad.yaml", tmp_path / "good.yaml"
    bad.write_text("models:\n  a:\n    model: ./missing\n")
    good.write_text(f"models:\n  tools:\n    model: {tiny_models['tiny-tools']}\n")
    code = (
        "import socket, sys; from click.testing import CliRunner; from server.cli.main import main; "
        "t = socket.socket(); t.bind(('127.0.0.1', 0)); t.listen(); port = str(t.getsockname()[1]); "
        f"u = CliRunner().invoke(main, ['serve', {str(good)!r}, '--max-model-lenn', '5']); "
        f"p = CliRunner().invoke(main, ['serve', {str(bad)!r}, '--dtype', 'float32', '--port', '1']); "
        f"b = CliRunner().invoke(main, ['serve', {str(good)!r}, '--dtype', 'float32', '--port', port]); "
        "print(u.exit_code, p.exit_code, b.exit_code, 'vllm' in sys.modules, 'torch' in sys.modules); "
        "print(u.output + p.output + b.output, file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.stdout.split() == ["2", "1", "1", "False", "False"], done.stderr
    assert "unknown option --max-model-lenn" in done.stderr
    assert f"{bad}:3:12: error: model 'a': model path './missing' does not exist" in done.stderr
    assert "cannot listen on 127.0.0.1:" in done.stderr


def test_a_secret_given_both_as_its_variable_and_its_file_stops_serve_before_any_engine(
    tiny_models: dict[str, Path], tmp_path: Path
) -> None:
    profile = tmp_path / "twice.yaml"
    profile.write_text(f"models:\n  tools:\n    model: {tiny_models['tiny-tools']}\n")
    key = tmp_path / "key"
    key.write_text("the-file-key\n")
    key.chmod(0o600)
    result = _serve(
        str(profile), "--port", "1", env={"TURNOUT_API_KEY": "the-plain-key", "TURNOUT_API_KEY_FILE": str(key)}
    )
    assert result.returncode == 1, result.stderr[-2000:]
    expected = f"{profile}: error: both TURNOUT_API_KEY and TURNOUT_API_KEY_FILE are set"
    assert any(line.startswith(expected) for line in result.stderr.splitlines()), result.stderr[-2000:]
    shown = result.stderr + result.stdout
    assert "the-plain-key" not in shown and "the-file-key" not in shown
    assert "Traceback" not in shown and "Loading" not in shown


def test_a_scoped_key_given_as_a_file_is_read_from_it(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    profile = tmp_path / "keys.yaml"
    profile.write_text(
        f"models:\n  tools:\n    model: {tiny_models['tiny-tools']}\n"
        "server:\n  api_keys:\n    - {key_env: T48_TEAM_KEY, models: [tools]}\n"
    )
    key = tmp_path / "team"
    key.write_text("team-key\n")
    key.chmod(0o600)
    with socket.socket() as taken:  # the check after the keys': it stops serve before any engine
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _serve(str(profile), "--port", str(port), env={"T48_TEAM_KEY_FILE": str(key)})
    assert result.returncode == 1, result.stderr[-2000:]
    assert "T48_TEAM_KEY is not set" not in result.stderr, result.stderr[-2000:]
    assert f"error: cannot listen on 127.0.0.1:{port}" in result.stderr, result.stderr[-2000:]
