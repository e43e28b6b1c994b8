"""What differs between the profile a server runs and a newly validated one, for ``turnout reload``.

A model's settings fall in two groups. Frontend settings (chat template, parsers, auto tool choice) live in the
model's frontend bundle, which can be rebuilt over the running engine. Everything else (the model path, the
quantization config, vLLM's engine arguments) is baked into the engine when it loads. The reasoning parser is in
both: the bundle parses with it, and the engine's structured output reads it.

A chat template or quantization file can change while its path stays the same (the bundle and the engine read
the file themselves), so files are compared by content: :func:`file_digests` records what was applied.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Final, Literal

import msgspec

from server.profiles.schema import FRONTEND_SETTING_KEYS, REQUEST_BOUND_KEYS, RESIDENCY_KEYS, ModelProfile, Profile

__all__ = ["FRONTEND_FIELDS", "ModelChange", "ProfileChanges", "diff_profiles", "file_digests"]

#: Model settings that a new frontend bundle applies at once.
FRONTEND_FIELDS = (*FRONTEND_SETTING_KEYS, "served_model_name")
#: Model settings that only a new engine applies (besides every key of ``engine_args``).
_ENGINE_FIELDS = ("model", "quant_config", "reasoning_parser")
#: Settings files whose content counts, not just their path.
_FILE_FIELDS = ("chat_template", "quant_config")

ChangeKind = Literal["added", "removed", "changed"]


class ModelChange(msgspec.Struct, frozen=True, kw_only=True):
    """How one model differs.

    Attributes:
        name: The model's name in the profile.
        kind: ``added``, ``removed`` or ``changed``.
        frontend: Frontend settings that changed (``chat_template`` also when only its file's content did).
        engine: Engine settings that changed: ``model``, ``quant_config`` and engine argument names.
        residency: Residency settings and request bounds that changed (``pinned``, ``idle_unload_s``, ``max_n``,
            ...): the manager reads them from the profile, so they apply as soon as the reload does (``preload``
            only matters at start-up).
    """

    name: str
    kind: ChangeKind
    frontend: list[str] = msgspec.field(default_factory=list)
    engine: list[str] = msgspec.field(default_factory=list)
    residency: list[str] = msgspec.field(default_factory=list)


class ProfileChanges(msgspec.Struct, frozen=True, kw_only=True):
    """Everything that differs, model by model, and the settings that only a restart applies.

    Attributes:
        models: One entry per added, removed or changed model, in the new profile's order (removed ones last).
        restart_only: Settings outside ``models`` that changed (``switching.strategy``, ``default_model``, ...);
            the running server keeps its values until it restarts.
    """

    models: list[ModelChange]
    restart_only: list[str]

    @property
    def empty(self) -> bool:
        """Whether nothing at all differs."""
        return not self.models and not self.restart_only

    def names(self, kind: ChangeKind) -> list[str]:
        """The models of one kind of change."""
        return [change.name for change in self.models if change.kind == kind]


def file_digests(profile: Profile) -> dict[str, str | None]:
    """The SHA-256 of every chat template and quantization file ``profile`` names (None: unreadable)."""
    digests: dict[str, str | None] = {}
    for model in profile.models.values():
        for field in _FILE_FIELDS:
            path = getattr(model, field)
            if path is not None and path not in digests:
                digests[path] = _digest(path)
    return digests


def _digest(path: str) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def diff_profiles(
    old: Profile,
    old_digests: Mapping[str, str | None],
    new: Profile,
    new_digests: Mapping[str, str | None],
) -> ProfileChanges:
    """What ``new`` changes compared with ``old``, files compared by the digests taken when each was applied."""
    changes: list[ModelChange] = []
    for name, model in new.models.items():
        before = old.models.get(name)
        if before is None:
            changes.append(ModelChange(name=name, kind="added"))
            continue
        frontend = _changed_fields(before, old_digests, model, new_digests, FRONTEND_FIELDS)
        engine = _changed_fields(before, old_digests, model, new_digests, _ENGINE_FIELDS)
        engine += sorted(
            key
            for key in before.engine_args.keys() | model.engine_args.keys()
            if before.engine_args.get(key, _MISSING) != model.engine_args.get(key, _MISSING)
        )
        residency = _changed_fields(before, old_digests, model, new_digests, (*RESIDENCY_KEYS, *REQUEST_BOUND_KEYS))
        if frontend or engine or residency:
            changes.append(
                ModelChange(name=name, kind="changed", frontend=frontend, engine=engine, residency=residency)
            )
    changes += [ModelChange(name=name, kind="removed") for name in old.models if name not in new.models]
    return ProfileChanges(models=changes, restart_only=_restart_only(old, new))


_MISSING = object()


def _changed_fields(
    old: ModelProfile,
    old_digests: Mapping[str, str | None],
    new: ModelProfile,
    new_digests: Mapping[str, str | None],
    fields: tuple[str, ...],
) -> list[str]:
    changed = []
    for field in fields:
        before, after = getattr(old, field), getattr(new, field)
        if before != after or (
            field in _FILE_FIELDS and after is not None and old_digests.get(before) != new_digests.get(after)
        ):
            changed.append(field)
    return changed


#: Settings outside ``models`` that a reload applies at once (the API keys, in ``server/api/edge/key_ring.py``).
RELOADED_SETTINGS: Final = frozenset({"server.api_keys", "server.api_key_env", "server.api_key_cache_group"})


def _restart_only(old: Profile, new: Profile) -> list[str]:
    changed = ["default_model"] if old.default_model != new.default_model else []
    for section in ("switching", "server"):
        before, after = getattr(old, section), getattr(new, section)
        changed += [
            f"{section}.{field}"
            for field in before.__struct_fields__
            if getattr(before, field) != getattr(after, field) and f"{section}.{field}" not in RELOADED_SETTINGS
        ]
    return changed
