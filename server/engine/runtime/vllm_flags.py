"""vLLM's engine flags on ``turnout serve``'s command line, parsed by vLLM's own parser.

``turnout serve profile.yaml --max-model-len 4096 --dtype bfloat16`` works like the seed's server: every flag
that ``AsyncEngineArgs.add_cli_args`` registers is accepted, with vLLM's spelling rules (``--max_model_len``,
``--max-model-len=1k``, ``-O0``, ``--compilation-config.mode 0``) and type checks, and becomes a default for every
model; a model's own profile key wins. Only the flags actually given are returned, so vLLM's defaults stay
vLLM's to apply (and Turnout's KV budget still sees which models left the cache size open).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Final, NoReturn

from server.profiles.engine_args import did_you_mean

__all__ = ["EngineFlags", "EngineFlagsInvalid", "parse_engine_flags"]

#: Flags that name one model: the profile sets them per model, so they cannot be a default for all of them.
_PER_MODEL: Final = {
    "model": "each model's 'model' key in the profile",
    "served_model_name": "each model's name in the profile",
}
_POSITIONALS: Final = "turnout_positionals"
_UNRECOGNIZED: Final = "unrecognized arguments: "


class EngineFlagsInvalid(ValueError):
    """An engine flag is unknown to vLLM, has a bad value, or cannot be a default for every model."""


@dataclasses.dataclass(frozen=True)
class EngineFlags:
    """What the command line held besides Turnout's own options.

    Attributes:
        positionals: The arguments that are not flags (the profile file, for ``serve``).
        defaults: The engine arguments given as flags, by ``AsyncEngineArgs`` field name, as vLLM parsed them.
    """

    positionals: tuple[str, ...]
    defaults: Mapping[str, Any]


class _ParseError(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def parse_engine_flags(tokens: Sequence[str], *, own_options: Collection[str] = ()) -> EngineFlags:
    """Parse ``tokens`` with vLLM's ``AsyncEngineArgs`` parser.

    Args:
        tokens: The command-line words Turnout's own parser did not take.
        own_options: Turnout's own option names (for the "did you mean" of an unknown flag).

    Raises:
        EngineFlagsInvalid: With a message that names the flag.
    """
    if not any(token.startswith("-") for token in tokens):
        return EngineFlags(positionals=tuple(tokens), defaults={})  # no flags: no need to import vLLM
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    class Parser(FlexibleArgumentParser):
        def error(self, message: str) -> NoReturn:  # argparse would print usage and exit
            raise _ParseError(message)

    make_parser: Any = Parser  # vLLM's parser is untyped
    parser: Any = AsyncEngineArgs.add_cli_args(make_parser(prog="turnout serve", add_help=False))
    fields = [field.name for field in dataclasses.fields(AsyncEngineArgs)]
    unset = object()  # every flag defaults to this, so only the flags given come back
    parser.set_defaults(**dict.fromkeys(fields, unset))
    parser.add_argument(_POSITIONALS, nargs="*", default=[])
    try:
        namespace = parser.parse_args(list(tokens))
    except _ParseError as exc:
        flags = [option for action in parser._actions for option in action.option_strings]
        raise EngineFlagsInvalid(_explain(exc.message, [*flags, *own_options])) from None
    given = {name: value for name, value in vars(namespace).items() if name in fields and value is not unset}
    for name, where in _PER_MODEL.items():
        if name in given:
            flag = "--" + name.replace("_", "-")
            raise EngineFlagsInvalid(f"{flag} cannot be a default for every model; set {where}")
    return EngineFlags(positionals=tuple(getattr(namespace, _POSITIONALS)), defaults=given)


def _explain(message: str, known: Sequence[str]) -> str:
    if not message.startswith(_UNRECOGNIZED):
        return message  # a bad value: vLLM's parser names the flag and what it expected
    unknown = [word for word in message.removeprefix(_UNRECOGNIZED).split() if word.startswith("-")]
    if not unknown:
        return message
    long_options = [option for option in known if option.startswith("--")]
    parts = []
    for word in unknown:
        name = word.split("=", 1)[0]
        parts.append(f"unknown option {name}{did_you_mean(name, long_options if name.startswith('--') else known)}")
    return "; ".join(parts) + " (turnout serve takes its own options and vLLM's engine flags)"
