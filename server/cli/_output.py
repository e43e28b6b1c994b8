"""Console output shared by the CLI commands: one rich console for stdout, one for stderr."""

from __future__ import annotations

from collections.abc import Iterable

import click
from rich.console import Console

from server.profiles import ProfileIssue

__all__ = ["err_console", "out_console", "print_issues"]

# soft_wrap: a printed message is never hard-wrapped at the console's width (80 columns when the output is not a
# terminal), so every error stays one line that editors, CI logs and grep can read as ``file:line:col: message``.
out_console = Console(highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


def print_issues(issues: Iterable[ProfileIssue]) -> None:
    """Print profile issues as ``file:line:col: severity: message`` on stderr."""
    for issue in issues:
        # Plain echo, not rich: one issue must stay one greppable line whatever the terminal width.
        click.echo(f"{issue.file}:{issue.line}:{issue.col}: {issue.severity}: {issue.message}", err=True)
