"""``--log-format``: the JSON lines' fields, and the one ``dictConfig`` Turnout, uvicorn and vLLM share."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from server.profiles import LOG_MODEL_ENV, REQUEST_ID, JsonFormatter, logging_config, write_vllm_logging_config


def _record(message: str = "hello %s", *args: object) -> logging.LogRecord:
    return logging.LogRecord("turnout.engine", logging.WARNING, __file__, 1, message, args or ("world",), None)


def test_a_json_line_has_time_level_logger_message_and_pid() -> None:
    line = json.loads(JsonFormatter().format(_record()))
    assert line["level"] == "WARNING" and line["logger"] == "turnout.engine" and line["message"] == "hello world"
    assert line["time"].endswith("+00:00") and isinstance(line["pid"], int)
    assert "model" not in line and "request_id" not in line


def test_a_json_line_names_the_model_of_an_engine_process_and_the_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LOG_MODEL_ENV, "tools")
    formatter = JsonFormatter()  # an engine process: the variable is in its environment when logging is set up
    monkeypatch.delenv(LOG_MODEL_ENV)
    record = _record("two\nlines %s")
    record.vllm_process_name = "EngineCore"  # what vLLM's record factory adds (its "(EngineCore pid=...)" prefix)
    token = REQUEST_ID.set("req-1")
    try:
        text = formatter.format(record)
    finally:
        REQUEST_ID.reset(token)
    assert "\n" not in text  # one line, whatever the message
    line = json.loads(text)
    assert line["model"] == "tools" and line["request_id"] == "req-1" and line["process"] == "EngineCore"
    assert line["message"] == "two\nlines world"
    # Turnout's own process has the variable only around a spawn: a formatter made without it never names a model.
    assert "model" not in json.loads(JsonFormatter().format(_record()))


def test_an_exception_stays_in_its_json_line() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    line = json.loads(JsonFormatter().format(record))
    assert "ValueError: boom" in line["exception"]


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_vllm_s_and_uvicorn_s_loggers_print_through_the_one_handler(log_format: str, tmp_path: Path) -> None:
    env = write_vllm_logging_config(log_format, "info", tmp_path)  # type: ignore[arg-type]
    assert env["VLLM_CONFIGURE_LOGGING"] == "1"
    config = json.loads(Path(env["VLLM_LOGGING_CONFIG_PATH"]).read_text())
    assert config == logging_config(log_format, "info")  # type: ignore[arg-type]
    for name in ("vllm", "uvicorn", "uvicorn.error", "uvicorn.access"):
        assert config["loggers"][name] == {"handlers": ["turnout"], "level": "INFO", "propagate": False}
    # In a process of its own: dictConfig replaces (and closes) every handler of the process it runs in.
    code = (
        "import json, logging, logging.config, sys; logging.config.dictConfig(json.load(open(sys.argv[1])));"
        "logging.getLogger('vllm.engine').info('from vllm');"
        "logging.getLogger('uvicorn.access').info('%s - %s %s HTTP/%s %d', '127.0.0.1:1', 'GET', '/ready', '1.1', 200);"
        "logging.getLogger('turnout.cli').info('from turnout')"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, env["VLLM_LOGGING_CONFIG_PATH"]], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 3
    if log_format == "json":
        parsed = [json.loads(line) for line in lines]
        assert [item["logger"] for item in parsed] == ["vllm.engine", "uvicorn.access", "turnout.cli"]
        assert parsed[1]["message"] == "127.0.0.1:1 - GET /ready HTTP/1.1 200"
    else:  # one text format: time, level, pid, logger, message
        assert all(" INFO [" in line for line in lines)
        assert lines[0].endswith("] vllm.engine: from vllm") and lines[2].endswith("] turnout.cli: from turnout")
