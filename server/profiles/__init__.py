"""Profiles: which models a Turnout server offers, how it switches between them, and their validation.

The public API is re-exported here; the rest of the package is internal. The lowest layer (see
``server/__init__.py``): it imports nothing else of ours, and neither Litestar nor vLLM (only vLLM's source text,
read with ``ast`` in ``vllm_source.py``), so ``turnout validate`` starts fast.
"""

from server.profiles.issues import ProfileInvalid, ProfileIssue, Severity, ValidationResult
from server.profiles.loader import CONFIG_ENV, MODEL_ENV, load_profile, validate_profile
from server.profiles.registry import ParserRegistry
from server.profiles.schema import (
    FRONTEND_KEYS,
    ChatTemplateContentFormat,
    DisabledThinkingEffort,
    ModelProfile,
    Profile,
    ServerSection,
    Switching,
    ToolStrictLevel,
)

__all__ = [
    "CONFIG_ENV",
    "FRONTEND_KEYS",
    "MODEL_ENV",
    "ChatTemplateContentFormat",
    "DisabledThinkingEffort",
    "ModelProfile",
    "ParserRegistry",
    "Profile",
    "ProfileInvalid",
    "ProfileIssue",
    "ServerSection",
    "Severity",
    "Switching",
    "ToolStrictLevel",
    "ValidationResult",
    "load_profile",
    "validate_profile",
]
