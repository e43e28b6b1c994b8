"""What validation reports: positioned issues, the result of a validation, the exception of a failed load."""

from __future__ import annotations

from typing import Literal

from msgspec import Struct

from server.profiles.schema import Profile

__all__ = ["ProfileInvalid", "ProfileIssue", "Severity", "ValidationResult"]

Severity = Literal["error", "warning"]


class ProfileIssue(Struct, frozen=True, kw_only=True):
    """One problem found in a profile, at the place in the file that causes it.

    Attributes:
        file: The profile file, as the caller named it (so the output points where the user looked).
        line: 1-based line in ``file``.
        col: 1-based column in ``file``.
        message: What is wrong and, where we know it, how to fix it.
        severity: ``error`` stops the profile from loading; ``warning`` does not.
    """

    file: str
    line: int
    col: int
    message: str
    severity: Severity = "error"

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}: {self.message}"


class ValidationResult(Struct, frozen=True, kw_only=True):
    """The outcome of validating one profile file.

    Attributes:
        profile: The resolved profile, or ``None`` when there is any error.
        errors: Every error, ordered by position.
        warnings: Every warning, ordered by position.
    """

    profile: Profile | None
    errors: list[ProfileIssue]
    warnings: list[ProfileIssue]

    @property
    def ok(self) -> bool:
        """Whether the profile loads (warnings allowed)."""
        return not self.errors


class ProfileInvalid(Exception):
    """Raised by ``load_profile`` when a profile has errors; carries all of them, not just the first.

    Attributes:
        errors: Every error, ordered by position.
        warnings: Every warning, ordered by position.
    """

    def __init__(self, errors: list[ProfileIssue], warnings: list[ProfileIssue]) -> None:
        self.errors = errors
        self.warnings = warnings
        super().__init__("\n".join(str(issue) for issue in errors))
