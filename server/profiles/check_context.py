"""Collects every issue of one validation, and carries what the checks share."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from server.profiles.issues import ProfileIssue, Severity, ValidationResult
from server.profiles.registry import ParserRegistry
from server.profiles.schema import Profile
from server.profiles.vllm_source import EngineArgField

__all__ = ["Collector", "Context", "Finding", "Pos"]

#: A 1-based (line, column) in the profile file.
Pos = tuple[int, int]
#: A problem found away from the YAML tree (a template, a JSON file): the caller knows where to put it.
Finding = tuple[Severity, str]
_ESCAPES: Final = {code: f"\\x{code:02x}" for code in [*range(32), 127]}


class Collector:
    """Gathers errors and warnings for one file; validation never stops at the first one."""

    def __init__(self, file: str) -> None:
        self.file = file
        self._issues: list[ProfileIssue] = []

    def add(self, pos: Pos, message: str, severity: Severity = "error") -> None:
        """Record one issue at ``pos``."""
        line, col = pos
        # One issue is one line: a newline or other control character from a path must not break that.
        message = message.translate(_ESCAPES)
        self._issues.append(ProfileIssue(file=self.file, line=line, col=col, message=message, severity=severity))

    def error(self, pos: Pos, message: str) -> None:
        """Record an error at ``pos``."""
        self.add(pos, message, "error")

    def warning(self, pos: Pos, message: str) -> None:
        """Record a warning at ``pos``."""
        self.add(pos, message, "warning")

    def extend(self, pos: Pos, findings: list[Finding], prefix: str = "") -> None:
        """Record findings that a check returned, all at ``pos``."""
        for severity, message in findings:
            self.add(pos, prefix + message, severity)

    @property
    def error_count(self) -> int:
        """How many errors so far (checks compare counts to see whether they added one)."""
        return sum(issue.severity == "error" for issue in self._issues)

    def result(self, profile: Profile | None) -> ValidationResult:
        """Freeze into a result; the profile is dropped when there is any error."""
        ordered = sorted(self._issues, key=lambda issue: (issue.line, issue.col))
        errors = [issue for issue in ordered if issue.severity == "error"]
        warnings = [issue for issue in ordered if issue.severity == "warning"]
        return ValidationResult(profile=None if errors else profile, errors=errors, warnings=warnings)


@dataclass(frozen=True)
class Context:
    """What every check of one profile needs besides the node it looks at.

    Attributes:
        report: Where issues go.
        profile_dir: The profile file's folder (relative paths resolve against it).
        cwd: The working directory (vLLM and INC resolve some relative paths against it).
        env: The environment (``MODEL``, the Hugging Face cache variables).
        parsers: The registry to check parser names against, or ``None`` to skip those checks.
        engine_fields: ``AsyncEngineArgs``' fields as vLLM's source declares them, or ``None`` when vLLM is not
            installed.
        tool_parser_names: ``parsers``' tool parser names, read once.
        reasoning_parser_names: ``parsers``' reasoning parser names, read once.
        default_tool_call_parser: The server's default tool parser (its ``--tool-call-parser``), if any.
        default_enable_auto_tool_choice: The server's default auto tool choice (``--enable-auto-tool-choice``).
    """

    report: Collector
    profile_dir: Path
    cwd: Path
    env: Mapping[str, str]
    parsers: ParserRegistry | None
    engine_fields: Mapping[str, EngineArgField] | None
    tool_parser_names: Collection[str] = field(default=())
    reasoning_parser_names: Collection[str] = field(default=())
    default_tool_call_parser: str | None = None
    default_enable_auto_tool_choice: bool = False
