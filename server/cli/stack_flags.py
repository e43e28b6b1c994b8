"""The options of ``turnout serve`` that shape the serving stack, stated once for ``turnout serve`` and
``turnout ray-serve``: both turn them into the same ``StackOptions`` (``ServeOptions.stack``), which a Ray node's
assembly gets as ``turnout serve``'s does."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, TypeVar

import click

__all__ = ["ADMISSION_TIMEOUT_OPTION", "NO_PRELOAD_OPTION", "frontend_default_options"]

F = TypeVar("F", bound=Callable[..., Any])

ADMISSION_TIMEOUT_OPTION: Final = click.option(
    "--admission-timeout",
    type=float,
    default=None,
    help="Most seconds a request waits for a switch (default 600; auto mode refuses earlier, at switching.max_wait_s).",
)
NO_PRELOAD_OPTION: Final = click.option(
    "--no-preload",
    is_flag=True,
    help="Load only the default model at start, whatever the profile's preload keys say (a quick look at a profile).",
)
#: Every model's frontend defaults (a model's own profile key wins), in the order ``--help`` lists them.
_FRONTEND_DEFAULTS: Final = (
    click.option("--enable-auto-tool-choice", is_flag=True, help="Default for models whose profile does not set it."),
    click.option("--tool-call-parser", default=None, help="Default tool parser for models whose profile sets none."),
    click.option("--chat-template", default=None, help="Default chat template for models whose profile sets none."),
    click.option(
        "--reasoning-parser", default=None, help="Default reasoning parser for models whose profile sets none."
    ),
)


def frontend_default_options(command: F) -> F:
    """``command`` with the frontend-default options: ``--enable-auto-tool-choice``, ``--tool-call-parser``,
    ``--chat-template`` and ``--reasoning-parser``."""
    for option in reversed(_FRONTEND_DEFAULTS):  # click lists a command's options in the order they were applied
        command = option(command)
    return command
