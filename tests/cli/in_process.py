"""``turnout`` commands run in the test's own process, through click's ``CliRunner``.

A refusal that needs vLLM's flags costs a subprocess an import of vLLM (about 10 s on a 2-core machine); the
test process has vLLM imported already. Only for commands that stop before any engine or server starts, and
leave nothing behind in the process (a parser plugin would stay registered: those run as subprocesses).
"""

from __future__ import annotations

from dataclasses import dataclass

from click.testing import CliRunner

from server.cli.main import main
from server.profiles import CONFIG_ENV

__all__ = ["Ran", "turnout"]


@dataclass(frozen=True)
class Ran:
    """What a command did, named as ``subprocess.CompletedProcess`` names it."""

    returncode: int
    stdout: str
    stderr: str


def turnout(*args: str, env: dict[str, str] | None = None) -> Ran:
    """Run ``turnout ARGS`` with ``env`` added to the environment and ``$VLLM_HPU_MULTI_MODEL_CONFIG`` unset."""
    # VLLM_CONFIGURE_LOGGING=0: a serve that gets past its early checks sets up its logging, and must not point the
    # test process's later engines at its own vLLM logging file (set_up_logging keeps a set-up the user chose).
    runner = CliRunner(env={CONFIG_ENV: None, "VLLM_CONFIGURE_LOGGING": "0", **(env or {})})
    result = runner.invoke(main, list(args), catch_exceptions=False)
    return Ran(result.exit_code, result.stdout, result.stderr)
