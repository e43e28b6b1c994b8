"""Profiles: which models a Turnout server offers, how it switches between them, and their validation.

The public API is re-exported here; the rest of the package is internal. Other packages import this face, and
``vllm_version`` (the vLLM version check) on its own, which vLLM's processes load without the profile loader
(``tests/test_layers.py``; the engine's own imports of ``schema`` are still to move). The lowest layer (see
``server/__init__.py``): it imports nothing else of ours, and neither Litestar nor vLLM (only vLLM's source text,
read with ``ast`` in ``vllm_source.py``), so ``turnout validate`` starts fast.
"""

from server.profiles.budget_checks import guess_platform
from server.profiles.changes import ModelChange, ProfileChanges, diff_profiles, file_digests
from server.profiles.engine_args import did_you_mean
from server.profiles.footprint import Footprint, FootprintUnknown, model_footprint
from server.profiles.issues import ProfileInvalid, ProfileIssue, Severity, ValidationResult
from server.profiles.json_schema import FieldDoc, StructDoc, field_reference, profile_json_schema
from server.profiles.loader import CONFIG_ENV, MODEL_ENV, load_profile, validate_profile
from server.profiles.log_format import (
    LOG_FORMATS,
    LOG_MODEL_ENV,
    REQUEST_ID,
    VLLM_CONFIGURE_LOGGING_ENV,
    VLLM_LOGGING_CONFIG_PATH_ENV,
    JsonFormatter,
    LogFormat,
    describe_start,
    logging_config,
    write_vllm_logging_config,
)
from server.profiles.memory_budget import budget_bytes, describe_size
from server.profiles.registry import ParserRegistry
from server.profiles.schema import (
    DEFAULT_ADMIN_TOKEN_ENV,
    FRONTEND_KEYS,
    FRONTEND_SETTING_KEYS,
    ApiKeyScope,
    ChatTemplateContentFormat,
    DisabledThinkingEffort,
    EvictionRule,
    ModelProfile,
    Profile,
    ServerSection,
    Switching,
    ToolStrictLevel,
)
from server.profiles.vllm_source import source_flag_names, source_parser_registry

__all__ = [
    "CONFIG_ENV",
    "DEFAULT_ADMIN_TOKEN_ENV",
    "FRONTEND_KEYS",
    "FRONTEND_SETTING_KEYS",
    "LOG_FORMATS",
    "LOG_MODEL_ENV",
    "MODEL_ENV",
    "REQUEST_ID",
    "VLLM_CONFIGURE_LOGGING_ENV",
    "VLLM_LOGGING_CONFIG_PATH_ENV",
    "ApiKeyScope",
    "ChatTemplateContentFormat",
    "DisabledThinkingEffort",
    "EvictionRule",
    "FieldDoc",
    "Footprint",
    "FootprintUnknown",
    "JsonFormatter",
    "LogFormat",
    "ModelChange",
    "ModelProfile",
    "ParserRegistry",
    "Profile",
    "ProfileChanges",
    "ProfileInvalid",
    "ProfileIssue",
    "ServerSection",
    "Severity",
    "StructDoc",
    "Switching",
    "ToolStrictLevel",
    "ValidationResult",
    "budget_bytes",
    "describe_size",
    "describe_start",
    "did_you_mean",
    "diff_profiles",
    "field_reference",
    "file_digests",
    "guess_platform",
    "load_profile",
    "logging_config",
    "model_footprint",
    "profile_json_schema",
    "source_flag_names",
    "source_parser_registry",
    "validate_profile",
    "write_vllm_logging_config",
]
