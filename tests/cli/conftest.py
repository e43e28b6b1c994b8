"""CLI test fixtures: the profile tests' workspace, isolated environment and INC stand-in, shared as they are."""

from tests.profiles.conftest import _inc_present, env, workspace

__all__ = ["_inc_present", "env", "workspace"]
