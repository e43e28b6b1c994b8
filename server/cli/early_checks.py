"""The checks ``turnout serve`` makes before vLLM is imported (that takes seconds): a mistyped flag, a refused
profile, an unset key variable or a taken port fail at once, in one line each."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

import click

from server.cli.frontend_flags import REFUSED, FrontendFlagError, split_frontend_flags
from server.cli.listener import bind_listener
from server.profiles import did_you_mean, source_flag_names

__all__ = ["early_profile", "refuse_taken_port", "refuse_unknown_flags"]

#: Flags that load parser plugins: their parser names are valid in the profile only once vLLM loaded them.
_PLUGIN_FLAGS: Final = ("--tool-parser-plugin", "--reasoning-parser-plugin")
_LOG_OUTPUTS: Final = "--enable-log-outputs"
_LOG_REQUESTS: Final = "--enable-log-requests"
_LOG_PREFIX: Final = len("--enable-log-")  # a longer prefix of --enable-log-requests is its abbreviation
_LONG_FLAG: Final = re.compile(r"--[A-Za-z0-9][A-Za-z0-9_-]*")


def _flag_name(token: str) -> str | None:
    """``--max_model_len=5`` and ``--compilation-config.mode`` as vLLM's parser reads them: ``--max-model-len``,
    ``--compilation-config``; ``None`` for a word that is no long flag (a value, a short flag such as ``-O0``)."""
    match = _LONG_FLAG.match(token)
    if match is None:
        return None
    return "--" + match.group(0)[2:].replace("_", "-")


def refuse_unknown_flags(args: Sequence[str], own_options: Sequence[str]) -> None:
    """A usage error naming every long flag in ``args`` that neither vLLM's engine and frontend parsers (read from
    vLLM's source) nor ``turnout serve`` have, as vLLM's own parser would refuse it later, with the closest flag;
    or naming a frontend flag ``turnout serve`` refuses (``frontend_flags.REFUSED``), with why.

    Nothing is refused when vLLM's source cannot be read: its parser then says what is wrong.
    """
    known = source_flag_names()
    if known is None:
        return
    accepted = {*known, *(option for option in own_options if option.startswith("--"))}
    names = [name for name in map(_flag_name, args) if name is not None]
    unknown = [name for name in names if not _accepted(name, accepted)]
    refused = {name[2:].replace("-", "_"): None for name in names}
    try:
        split_frontend_flags({key: value for key, value in refused.items() if key in REFUSED})
    except FrontendFlagError as exc:
        raise click.UsageError(str(exc)) from None
    if unknown:
        parts = [f"unknown option {name}{did_you_mean(name, sorted(accepted))}" for name in unknown]
        raise click.UsageError("; ".join(parts) + " (turnout serve takes its own options and vLLM's engine flags)")
    if _LOG_OUTPUTS in names and not any(_LOG_REQUESTS.startswith(name) and len(name) > _LOG_PREFIX for name in names):
        raise click.UsageError(f"{_LOG_OUTPUTS} requires {_LOG_REQUESTS} (as in vllm serve)")


def _accepted(name: str, accepted: set[str]) -> bool:
    if name in accepted:
        return True
    if name.startswith("--no-") and "--" + name.removeprefix("--no-") in accepted:
        return True  # a boolean flag's negation
    # argparse takes an abbreviation (vLLM's engine parser allows them); an ambiguous one is its parser's to refuse.
    return any(flag.startswith(name) for flag in accepted)


def early_profile(args: Sequence[str]) -> list[str] | None:
    """The PROFILE argument(s) as far as they can be told before vLLM's parser runs, or ``None`` when they cannot
    (a flag comes first, so a following word may be its value) or must wait for a parser plugin to load."""
    flags = [name for name in map(_flag_name, args) if name is not None]
    if any(flag in _PLUGIN_FLAGS for flag in flags):
        return None
    if not any(arg.startswith("-") for arg in args):
        return list(args)
    return [args[0]] if not args[0].startswith("-") else None


def refuse_taken_port(args: Sequence[str], host: str, port: int) -> None:
    """Exit 1 in one line when ``host:port`` cannot be bound now (taken, not this host's), unless ``--uds`` serves
    on a Unix socket instead. The server binds it again, and holds it, before the first engine starts."""
    if "--uds" in map(_flag_name, args):
        return
    try:
        bind_listener(host, port).close()
    except OSError as exc:
        click.echo(f"error: cannot listen on {host}:{port}: {exc.strerror or exc}; not starting.", err=True)
        raise SystemExit(1) from None
