"""``turnout serve``: the click command. It parses the flags into :class:`ServeOptions` and hands the profile to
the stack source (``server.api.StackSource``): checked before vLLM is imported (``profile_checks.py``), then
loaded, assembled and served under uvicorn (``uvicorn_server.py``)."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

import click

from server.cli.early_checks import early_profile, refuse_taken_port, refuse_unknown_flags
from server.cli.frontend_flags import split_frontend_flags
from server.cli.key_options import cli_api_key
from server.cli.logging_setup import LOG_FORMAT_OPTION, set_up_logging
from server.cli.profile_checks import load_serving_profile, refuse_invalid_profile
from server.cli.serve_options import ServeOptions, engine_defaults
from server.cli.stack_flags import ADMISSION_TIMEOUT_OPTION, NO_PRELOAD_OPTION, frontend_default_options
from server.cli.uvicorn_server import run_server
from server.profiles import CONFIG_ENV

__all__ = ["engine_defaults", "serve"]

logger = logging.getLogger("turnout.cli")


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED, metavar="[PROFILE] [VLLM FLAGS]...")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8000, show_default=True, type=int, help="Port to bind.")
@click.option(
    "--api-key-env",
    default=None,
    metavar="NAME",
    help="Require the key held by the variable NAME on /v1/* (default: the profile's api_key_env, then VLLM_API_KEY).",
)
@click.option(
    "--api-key-file", default=None, metavar="PATH", help="Require the key in this file (its first line) on /v1/*."
)
@click.option("--dev", is_flag=True, help="Open the admin routes without a token (trusted networks only).")
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["critical", "error", "warning", "info", "debug"]),
)
@ADMISSION_TIMEOUT_OPTION
@frontend_default_options
@click.option(
    "--watch", is_flag=True, help="Reload when the profile (or a chat template it names) is saved, as turnout reload."
)
@NO_PRELOAD_OPTION
@click.option(
    "--timeout-keep-alive",
    default=None,
    type=click.IntRange(min=1),
    # The profile's server.keep_alive_timeout_s says why its default is 65 s, not uvicorn's 5.
    help="Seconds an idle keep-alive connection stays open (default: the profile's server.keep_alive_timeout_s, "
    "65; keep it above your clients' and proxies' idle timeouts).",
)
@click.option(
    "--inject-fault",
    multiple=True,
    metavar="KIND:MODEL",
    help="Arm a fault for tests and drills (repeatable): weights:MODEL (MODEL's next in-place load negates a "
    "weight; the switch's proof catches it), kv:MODEL (its kept KV blocks are read back with flipped bytes; their "
    "digests refuse them). Never in production.",
)
@LOG_FORMAT_OPTION
@click.pass_context
def serve(ctx: click.Context, /, args: tuple[str, ...], **kwargs: Any) -> None:
    """Serve PROFILE (default: $VLLM_HPU_MULTI_MODEL_CONFIG) as an OpenAI-compatible server.

    Any vLLM engine flag (--max-model-len, --max-num-batched-tokens, --dtype, ...) is a default for every
    model; a model's own profile key overrides it. vLLM's frontend flags work as in `vllm serve`: TLS
    (--ssl-keyfile, --ssl-certfile, ...), CORS (--allowed-origins, ...), --root-path, --middleware,
    --tool-parser-plugin, and per-model defaults (--response-role, --chat-template-content-format, ...). A flag
    that cannot apply to a multi-model server is refused with the reason.
    """
    own = [option for param in ctx.command.params for option in param.opts if option.startswith("-")]
    # Flags, profile, key variables and port before vLLM is imported (seconds): each fails at once, in one line.
    refuse_unknown_flags(args, own)
    positionals = early_profile(args)
    from server.api import SourceOptions, StackOptions, StackSource, secret_env

    if positionals is not None:  # none to tell before vLLM's parser runs, or a parser plugin to load first
        parsers = {key: kwargs[key] for key in ("tool_call_parser", "enable_auto_tool_choice")}
        early = SourceOptions(path=_profile_path(positionals), stack=StackOptions(frontend_defaults=parsers))
        refuse_invalid_profile(StackSource(early))
    # --api-key-env NAME: NAME, else the file NAME_FILE names

    api_key = cli_api_key(kwargs["api_key_env"], kwargs.pop("api_key_file"), secret_env())
    refuse_taken_port(args, kwargs["host"], kwargs["port"])
    # Before vLLM is imported: it sets up its logging (from the file this names) when it is imported.
    setup = set_up_logging(kwargs["log_format"], kwargs["log_level"])
    from server.engine import EngineFlagsInvalid, parse_engine_flags
    from server.frontend import load_parser_plugins, parse_frontend_flags

    try:
        given, rest = parse_frontend_flags(args)
        frontend = split_frontend_flags(given)
        flags = parse_engine_flags(rest, own_options=own)
        # Before the profile is validated, so that the plugins' parser names are valid in it.
        load_parser_plugins(
            tool_parser_plugin=frontend.server.get("tool_parser_plugin"),
            reasoning_parser_plugin=flags.defaults.get("reasoning_parser_plugin"),
        )
    except (EngineFlagsInvalid, ValueError) as exc:
        raise click.UsageError(str(exc)) from None
    profile = _profile_path(flags.positionals)
    _arm_faults(kwargs["inject_fault"])
    if frontend.model_defaults.get("enable_log_outputs") and not flags.defaults.get("enable_log_requests"):
        raise click.UsageError("--enable-log-outputs requires --enable-log-requests (as in vllm serve)")
    options = ServeOptions(
        **kwargs,
        api_key=api_key,
        engine_defaults=engine_defaults(flags.defaults, kwargs["reasoning_parser"], frontend),
        frontend=frontend,
        logging_setup=setup,
    )
    # Profile validation says which model would get auto tool choice without a parser (one rule, one place).
    run_server(load_serving_profile(StackSource(options.source(profile))), options)


def _arm_faults(faults: Sequence[str]) -> None:
    """Arm each ``--inject-fault KIND:MODEL`` in this server, with a warning (before the profile is prepared: a
    ``kv`` fault goes into the model's engine arguments)."""
    from server.engine import FAULTS, parse_fault

    for text in faults:
        try:
            kind, model = parse_fault(text)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
        FAULTS.arm(kind, model)
        logger.warning("fault drill: %s is armed (--inject-fault); this server answers wrong on purpose", text)


def _profile_path(positionals: Sequence[str]) -> str | None:
    """The PROFILE argument (``None``: ``$VLLM_HPU_MULTI_MODEL_CONFIG`` names it); a usage error without either."""
    if len(positionals) > 1:
        raise click.UsageError(f"give one PROFILE file, got {len(positionals)}: {' '.join(positionals)}")
    profile = positionals[0] if positionals else None
    if profile is None and not os.environ.get(CONFIG_ENV):
        raise click.UsageError(f"Give a PROFILE file or set {CONFIG_ENV}.")
    return profile


if __name__ == "__main__":  # pragma: no cover - vLLM spawns processes: entry points must be guarded
    serve(sys.argv[1:])
