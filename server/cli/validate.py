"""``turnout validate FILE...``: check profiles, and say exactly what is wrong or what each model resolves to.

Everything goes to stdout, like ruff and mypy, so it pipes and greps: one line per issue,
``path:line:col: error: message`` or ``path:line:col: warning: message``, then, for a file without errors,
one summary line per model. ``--plan`` adds each model's memory footprint, the memory budget and which models can
be resident together (``plan_report.py``; no vLLM import, no engine). ``--format json`` prints one JSON document
instead. Exit status: 0 when no file
has an error, 1 when one has, 2 for a usage error. No input makes it print a traceback.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Literal, TextIO

import click
import msgspec

from server.cli.plan_report import PlanReport, build_plan_report, read_memory, render_plan
from server.profiles import (
    CONFIG_ENV,
    ParserRegistry,
    Profile,
    ProfileIssue,
    guess_platform,
    source_parser_registry,
    validate_profile,
)

__all__ = [
    "FileReport",
    "ModelSummary",
    "OutputFormat",
    "ValidateReport",
    "cli_parser_registry",
    "render_json",
    "render_text",
    "run_validate",
    "validate",
]

OutputFormat = Literal["text", "json"]
#: The profile a usage error points to: the one every checkout has.
_EXAMPLE = "profiles/demo.yaml"


class ModelSummary(msgspec.Struct, frozen=True, kw_only=True):
    """What one model of a valid profile resolves to."""

    name: str
    model: str
    default: bool
    tool_call_parser: str | None
    enable_auto_tool_choice: bool
    reasoning_parser: str | None
    chat_template: str | None
    quant_config: str | None


class FileReport(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The outcome for one file: its issues, and its models when it has no error."""

    file: str
    ok: bool
    errors: list[ProfileIssue]
    warnings: list[ProfileIssue]
    models: list[ModelSummary]
    plan: PlanReport | None = None


class ValidateReport(msgspec.Struct, frozen=True, kw_only=True):
    """The ``--format json`` document."""

    ok: bool
    files: list[FileReport]


def run_validate(
    files: Sequence[str],
    *,
    output_format: OutputFormat = "text",
    env: Mapping[str, str] | None = None,
    parsers: ParserRegistry | None,
    out: TextIO,
    plan: bool = False,
) -> int:
    """Validate each file, write the report to ``out`` and return the exit status (0 or 1).

    Args:
        files: The profiles to check.
        output_format: ``text`` (one line per issue or model) or ``json``.
        env: The environment (defaults to ``os.environ``).
        parsers: vLLM's parser registry; ``None`` when vLLM is not installed (names are then not checked,
            and each file gets a warning saying so).
        out: Where the report goes.
        plan: Add each valid profile's memory plan (footprints, budget, what fits together).
    """
    planner = _planner(os.environ if env is None else env) if plan else None
    reports = [_validate_one(file, env, parsers, planner) for file in files]
    report = ValidateReport(ok=all(item.ok for item in reports), files=reports)
    out.write(render_json(report) if output_format == "json" else render_text(report))
    return 0 if report.ok else 1


def _planner(env: Mapping[str, str]) -> Callable[[Profile], PlanReport]:
    """Builds a valid profile's plan on this machine (its platform and memory, read once)."""
    platform = guess_platform()
    memory = read_memory(platform)
    return lambda profile: build_plan_report(profile, platform=platform, memory=memory, env=env)


def _validate_one(
    file: str,
    env: Mapping[str, str] | None,
    parsers: ParserRegistry | None,
    planner: Callable[[Profile], PlanReport] | None = None,
) -> FileReport:
    try:
        result = validate_profile(file, env=env, parsers=parsers)
    except Exception as exc:  # the command boundary: a bug must still come out as a positioned error line
        issue = ProfileIssue(file=file, line=1, col=1, message=f"internal error: {type(exc).__name__}: {exc}")
        return FileReport(file=file, ok=False, errors=[issue], warnings=[], models=[])
    warnings = list(result.warnings)
    if parsers is None:
        message = "vLLM is not installed here, so tool and reasoning parser names are not checked"
        warnings.insert(0, ProfileIssue(file=file, line=1, col=1, message=message, severity="warning"))
    models = _summaries(result.profile) if result.profile is not None else []
    plan = planner(result.profile) if planner is not None and result.profile is not None else None
    return FileReport(
        file=file, ok=not result.errors, errors=result.errors, warnings=warnings, models=models, plan=plan
    )


def _summaries(profile: Profile) -> list[ModelSummary]:
    return [
        ModelSummary(
            name=name,
            model=_short(model.model),
            default=name == profile.default_model,
            tool_call_parser=model.tool_call_parser,
            enable_auto_tool_choice=bool(model.enable_auto_tool_choice),
            reasoning_parser=model.reasoning_parser,
            chat_template=_short(model.chat_template) if model.chat_template else None,
            quant_config=_short(model.quant_config) if model.quant_config else None,
        )
        for name, model in profile.models.items()
    ]


def _short(path: str) -> str:
    """A path under the working directory is shown relative to it; a hub id is not a path and stays."""
    if not os.path.isabs(path):
        return path
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def render_text(report: ValidateReport) -> str:
    """The human format: issues in file order, then one summary line per model of each valid file."""
    lines: list[str] = []
    for item in report.files:
        issues = sorted([*item.errors, *item.warnings], key=lambda issue: (issue.line, issue.col))
        lines.extend(f"{i.file}:{i.line}:{i.col}: {i.severity}: {i.message}" for i in issues)
        lines.extend(f"{item.file}: {_describe(model)}" for model in item.models)
        if item.plan is not None:
            lines.extend(f"{item.file}: {line}" for line in render_plan(item.plan))
    return "".join(line + "\n" for line in lines)


def _describe(model: ModelSummary) -> str:
    default = " (default)" if model.default else ""
    return (
        f"model {model.name!r}{default} -> {model.model} ("
        f"tool parser {model.tool_call_parser or 'none'}, "
        f"auto tool choice {'on' if model.enable_auto_tool_choice else 'off'}, "
        f"reasoning parser {model.reasoning_parser or 'none'}, "
        f"template {model.chat_template or 'from the model'}, "
        f"quant {model.quant_config or 'none'})"
    )


def render_json(report: ValidateReport) -> str:
    """The machine format: one JSON document (``ValidateReport``)."""
    return msgspec.json.encode(report).decode() + "\n"


def cli_parser_registry(
    *, import_vllm: bool = False, plugins: Mapping[str, str] | None = None
) -> ParserRegistry | None:
    """The parser names to check profiles against.

    By default they are read from the registration tables in vLLM's source (milliseconds, nothing imported), so
    hot-validation stays instant. With ``import_vllm`` (or when the tables cannot be read) they come from the
    frontend adapter's live registries, which imports vLLM (seconds); when that import fails (vLLM missing, a
    pinned-version mismatch, a broken torch), the source tables are used after all and stderr says why.

    ``plugins`` (``tool_parser_plugin`` / ``reasoning_parser_plugin`` files) are imported into vLLM's registries
    first, as ``turnout serve`` imports them; they need the live registries, so they import vLLM too.

    Returns:
        The registry, or ``None`` when vLLM is not installed at all.

    Raises:
        ValueError: A plugin file that cannot be loaded.
    """
    if plugins:
        with contextlib.redirect_stdout(sys.stderr):
            from server.frontend import load_parser_plugins, parser_registry

            load_parser_plugins(**plugins)
            return parser_registry()
    if not import_vllm:
        static = source_parser_registry()
        if static is not None:
            return static
    try:
        # stdout carries the report (JSON included): anything vLLM prints while importing goes to stderr.
        with contextlib.redirect_stdout(sys.stderr):
            from server.frontend import parser_registry

            return parser_registry()
    except Exception as exc:  # importing vLLM runs a lot of code; none of its failures may escape
        registry = source_parser_registry()
        if registry is not None:
            click.echo(
                f"turnout validate: vLLM's frontend did not import ({type(exc).__name__}: {exc}); "
                "parser names come from vLLM's source instead",
                err=True,
            )
        return registry


@click.command("validate")
@click.argument("files", nargs=-1, metavar="[FILE]...")
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="text: one line per issue and per model; json: one JSON document.",
)
@click.option(
    "--plan",
    is_flag=True,
    help="Also print each model's memory footprint, the memory budget and which models fit together (no vLLM).",
)
@click.option(
    "--import-vllm",
    is_flag=True,
    help="Check parser names against vLLM's live registries (imports vLLM: seconds) instead of its source tables.",
)
@click.option(
    "--tool-parser-plugin",
    default=None,
    metavar="FILE",
    help="A tool parser plugin file (as vllm serve's): its parsers become valid tool_call_parser names.",
)
@click.option(
    "--reasoning-parser-plugin",
    default=None,
    metavar="FILE",
    help="A reasoning parser plugin file: its parsers become valid reasoning_parser names.",
)
def validate(
    files: tuple[str, ...],
    output_format: OutputFormat,
    plan: bool,
    import_vllm: bool,
    tool_parser_plugin: str | None,
    reasoning_parser_plugin: str | None,
) -> None:
    """Check profiles (YAML or JSON) and report every error as path:line:col.

    Output goes to stdout. Exit status: 0 when no profile has an error, 1 when one has, 2 for a usage error.
    With no FILE, checks the profile that vLLM-Gaudi's $VLLM_HPU_MULTI_MODEL_CONFIG names, when it is set.

    \b
    Examples:
      turnout validate profiles/demo.yaml
      turnout validate --plan profiles/*.yaml
    """
    if not files:
        configured = os.environ.get(CONFIG_ENV)
        if not configured:
            raise click.UsageError(f"no profile given: name one, for example `turnout validate {_EXAMPLE}`")
        files = (configured,)
    with contextlib.suppress(AttributeError, ValueError):
        # A file name or value that the terminal cannot encode must not crash the report.
        sys.stdout.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]
    plugins = {
        key: value
        for key, value in (
            ("tool_parser_plugin", tool_parser_plugin),
            ("reasoning_parser_plugin", reasoning_parser_plugin),
        )
        if value
    }
    try:
        registry = cli_parser_registry(import_vllm=import_vllm, plugins=plugins)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    try:
        code = run_validate(files, output_format=output_format, parsers=registry, out=sys.stdout, plan=plan)
    except Exception as exc:  # the command boundary: never a traceback
        click.echo(f"turnout validate: internal error: {type(exc).__name__}: {exc}", err=True)
        code = 1
    click.get_current_context().exit(code)
