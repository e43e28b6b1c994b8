"""vLLM's frontend flags (`FrontendArgs`, the server half of `vllm serve`'s `make_arg_parser`), parsed by vLLM.

Like the engine flags (``server/engine/runtime/vllm_flags.py``), each flag keeps vLLM's spelling, types and choices, and
only the flags actually given come back. What Turnout does with each is ``server/cli/frontend_flags.py``'s table.
The parser plugin flags' files are loaded by ``_parsers``.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence
from typing import Any

from vllm.entrypoints.serve.utils.fingerprint import FingerprintMode, set_default_fingerprint_mode
from vllm.utils.argparse_utils import FlexibleArgumentParser

from server.frontend.vllm_adapter._moved import moved

__all__ = ["frontend_flag_names", "parse_frontend_flags", "set_fingerprint_mode"]

FrontendArgs: Any = moved("FrontendArgs")


def _parser() -> argparse.ArgumentParser:
    # No abbreviations: `--ssl` must not silently mean `--ssl-keyfile`, nor an engine flag a frontend one.
    parser = FlexibleArgumentParser(add_help=False, allow_abbrev=False)  # type: ignore[no-untyped-call]
    FrontendArgs.add_cli_args(parser)
    return parser


def frontend_flag_names() -> dict[str, tuple[str, ...]]:
    """Every field of vLLM's `FrontendArgs` and the option strings its flag has."""
    parser = _parser()
    options = {action.dest: tuple(action.option_strings) for action in parser._actions if action.option_strings}
    return {field.name: options.get(field.name, ()) for field in dataclasses.fields(FrontendArgs)}


def parse_frontend_flags(tokens: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
    """Take vLLM's frontend flags out of ``tokens``.

    Returns:
        The flags given (by `FrontendArgs` field name, as vLLM parsed them; a flag given its default value
        counts as not given), and the tokens left for the engine parser (engine flags, the profile path).

    Raises:
        ValueError: A frontend flag with a bad value, with vLLM's message.
    """
    parser = _parser()
    defaults = {action.dest: action.default for action in parser._actions}
    try:
        namespace, rest = parser.parse_known_args(list(tokens))
    except (SystemExit, argparse.ArgumentError) as exc:  # argparse exits on a bad value
        raise ValueError(f"invalid vLLM frontend flag: {exc}") from None
    given = {key: value for key, value in vars(namespace).items() if value != defaults.get(key)}
    return given, rest


def set_fingerprint_mode(mode: FingerprintMode, value: str | None = None) -> None:
    """Set the ``system_fingerprint`` every serving object built from now on answers with (``--fingerprint-mode``).

    vLLM keeps the mode process-wide and each serving object computes its fingerprint once, from its own engine's
    config, so one call before the first bundle gives every model its own fingerprint in the chosen mode.
    """
    set_default_fingerprint_mode(mode, value)
