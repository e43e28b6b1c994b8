"""How ``turnout serve`` and ``turnout ray-serve`` refuse a profile: every error as ``file:line:col: message``, all
at once, and exit 1 (the stack source finds them; this module prints them)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, NoReturn

import click

from server.cli._output import err_console, print_issues
from server.profiles import Profile, ProfileInvalid, ProfileIssue

if TYPE_CHECKING:
    from server.api import ApiSettings, ServingFlags, StackSource

__all__ = ["load_serving_profile", "refuse_invalid_profile", "refused_stack", "settings_or_exit", "unset_key_exits"]


def refuse_invalid_profile(source: StackSource) -> None:
    """Exit 1 printing every error when the profile is invalid, before vLLM is imported (that takes seconds):
    ``StackSource.check``, then its key variables (``StackSource.check_keys``). A valid profile is validated
    again, live, when it is loaded."""
    result = source.check()
    if result is None:  # vLLM is not installed: serving fails later, saying so
        return
    if result.profile is None:
        _refuse(result.errors, result.warnings)
    # Litestar, not vLLM: an unset key variable, or one given twice (VAR and VAR_FILE), is said in well under a second
    with unset_key_exits(result.profile):
        source.check_keys(result.profile)


def load_serving_profile(source: StackSource) -> StackSource:
    """``source`` with its profile loaded (``StackSource.require``: validated like ``turnout validate`` does, with
    the command line's frontend defaults); exits 1 printing every error."""
    try:
        source.require()
    except ProfileInvalid as invalid:
        _refuse(invalid.errors, invalid.warnings)
    return source


def _refuse(errors: list[ProfileIssue], warnings: list[ProfileIssue]) -> NoReturn:
    print_issues([*errors, *warnings])
    err_console.print(f"[bold red]The profile has {len(errors)} error(s); not starting.[/]")
    raise SystemExit(1)


def settings_or_exit(profile: Profile, flags: ServingFlags) -> ApiSettings:
    """The app's settings from ``profile``, this environment and ``flags`` (``serving_settings.api_settings``);
    exits 1 naming a ``server.api_keys`` variable that is not set."""
    from server.api import api_settings, secret_env

    with unset_key_exits(profile):
        settings = api_settings(profile, flags, secret_env())
    return settings


@contextmanager
def unset_key_exits(profile: Profile) -> Iterator[None]:
    """Exit 1 naming the ``server.api_keys`` variable that is not set, or a secret given both as ``VAR`` and
    ``VAR_FILE`` (one line: ``file: error: ...``)."""
    from server.api import KeyNotSet, SecretSourceInvalid

    try:
        yield
    except (KeyNotSet, SecretSourceInvalid) as exc:
        err_console.print(f"{profile.path}: error: {exc}", markup=False)
        raise SystemExit(1) from None


@contextmanager
def refused_stack(profile: Profile) -> Iterator[None]:
    """Exit 1 naming what is wrong when the profile's stack cannot be assembled (``StackSource.assemble``)."""
    from server.engine import EngineConfigInvalid, MemoryBudgetExceeded, StrategyUnavailable

    try:
        with unset_key_exits(profile):
            yield
    except EngineConfigInvalid as invalid:
        for problem in invalid.problems:
            click.echo(f"{profile.path}: error: {problem}", err=True)  # one greppable line each
        err_console.print("[bold red]vLLM refused the engine arguments; not starting.[/]")
        raise SystemExit(1) from None
    except MemoryBudgetExceeded as exceeded:
        for line in exceeded.plan.summary():
            click.echo(line, err=True)
        err_console.print("[bold red]The models do not fit in memory as configured; not starting.[/]")
        raise SystemExit(1) from None
    except StrategyUnavailable as exc:
        err_console.print(f"{profile.path}: error: {exc}", markup=False)
        raise SystemExit(1) from None
