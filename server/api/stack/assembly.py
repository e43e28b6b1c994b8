"""The assembly of the serving stack: the app's settings and key ring, the engine manager and its bundle builder,
the frontend and engine defaults, from a validated profile and one :class:`StackOptions`.

:class:`~server.api.stack.StackSource` calls :func:`assemble_stack` for ``turnout serve`` and every Ray Serve node
alike, so an option set on the command line reaches both (a Ray node once built its bundles with a bare
``FrontendSettings()`` and no engine defaults, so no flag of ``turnout serve`` had a counterpart on Ray). The
options travel to a node inside the application's options (``server.cluster.node_options``). A model's bundle is
built here too, below the CLI: the manager's device calls :func:`bundle_builder`'s function when it publishes a
model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from server.api.admission import ServingBundle
from server.api.edge import KeyRing, check_secret_sources, secret_env, secret_names, withhold_secrets
from server.api.settings import ApiSettings
from server.api.stack.options import StackOptions
from server.api.stack.serving_settings import ServingFlags, api_settings
from server.engine import CostBook, EngineManager, build_manager, prepare_profile, state_dir
from server.frontend import FrontendSettings, ProbeAnswer, build_bundle_for_profile, probe_bundle
from server.profiles import ModelProfile, Profile

if TYPE_CHECKING:
    from server.engine import BundleBuilder, MemoryPlan, MemoryReading

__all__ = [
    "ServingStack",
    "assemble_stack",
    "bundle_builder",
    "edge_settings",
    "prepare_stack",
    "probe_model",
    "without_preloads",
]


@dataclass(frozen=True, kw_only=True)
class ServingStack:
    """What :func:`assemble_stack` built.

    Attributes:
        profile: The profile as served (engine defaults applied, KV caches budgeted).
        memory_plan: The KV-cache plan (None where Turnout does not budget).
        manager: The engine manager; not started (the app's lifespan, or a node's first load, starts it).
        settings: The app's settings.
        key_ring: The serving routes' keys (``settings``' and the command line's): one ring for the app and its
            reloader, so that a reload that changes the keys applies them from the next request.
        frontend: The frontend defaults every model's bundle is built with.
    """

    profile: Profile
    memory_plan: MemoryPlan | None
    manager: EngineManager[ServingBundle]
    settings: ApiSettings
    key_ring: KeyRing
    frontend: FrontendSettings


def without_preloads(profile: Profile) -> Profile:
    """``profile`` with every model's ``preload`` off (``--no-preload``)."""
    models = {name: msgspec.structs.replace(model, preload=False) for name, model in profile.models.items()}
    return msgspec.structs.replace(profile, models=models)


def prepare_stack(
    profile: Profile, options: StackOptions, *, memory: MemoryReading | None = None
) -> tuple[Profile, MemoryPlan | None]:
    """``profile`` as served (``--no-preload`` applied), each model's engine arguments checked by vLLM with the
    engine defaults, and the KV-cache budget (``prepare_profile``); a reload passes the start-up ``memory``.

    Raises:
        EngineConfigInvalid, MemoryBudgetExceeded, StrategyUnavailable: As ``prepare_profile``.
    """
    served = without_preloads(profile) if options.no_preload else profile
    return prepare_profile(served, engine_defaults=options.engine_defaults, memory=memory)


def edge_settings(profile: Profile, flags: ServingFlags, extra_secrets: Iterable[str | None] = ()) -> ApiSettings:
    """The app's settings (``api_settings``) read from this process's environment, then the secrets moved out of it
    (with ``extra_secrets``), so that no engine process started later inherits them (``withheld_env.py``).

    A secret may be given as ``VAR_FILE`` (a file holding it) rather than ``VAR``; both at once is refused.

    Raises:
        KeyNotSet: A ``server.api_keys`` item's variable is unset.
        SecretSourceInvalid: A secret is given both ways, or its file cannot be read.
    """
    check_secret_sources(secret_names(profile, extra_secrets))
    settings = api_settings(profile, flags, secret_env())
    withhold_secrets(profile, extra_secrets)
    return settings


def bundle_builder(defaults: FrontendSettings) -> BundleBuilder[ServingBundle]:
    """The manager's bundle builder: a published model's bundle, its profile's frontend keys over ``defaults``."""

    async def build_bundle(name: str, model: ModelProfile, engine: Any) -> ServingBundle:
        bundle: ServingBundle = await build_bundle_for_profile(name, model, engine, defaults)
        return bundle

    return build_bundle


async def probe_model(name: str, model: ModelProfile, bundle: ServingBundle) -> ProbeAnswer:
    """The manager's probe: a switch proves a model through its own bundle (``switching.verify``)."""
    del name, model  # the bundle is the model's own
    return await probe_bundle(bundle)


def assemble_stack(
    profile: Profile,
    options: StackOptions,
    flags: ServingFlags,
    *,
    extra_secrets: Iterable[str | None] = (),
    on_prepared: Callable[[Profile, MemoryPlan | None], None] | None = None,
    warm_launcher: bool = False,
) -> ServingStack:
    """The serving stack of ``profile``: its settings and key ring (the secrets then withheld, before any engine
    process can start), the prepared profile (:func:`prepare_stack`), the frontend defaults, and the manager over
    them.

    Args:
        profile: The validated profile.
        options: The command line's part.
        flags: The command line's part of the app's settings.
        extra_secrets: More variables to withhold (``--api-key-env``).
        on_prepared: Called with the prepared profile and plan before the manager is built (``turnout serve``
            prints the plan and binds its port there, before the engine launcher starts).
        warm_launcher: Start the engine launcher with the manager (``build_manager``).

    Raises:
        KeyNotSet, SecretSourceInvalid: As :func:`edge_settings`.
        EngineConfigInvalid, MemoryBudgetExceeded, StrategyUnavailable: The profile cannot be served here.
    """
    from server.frontend import build_renderer, set_fingerprint_mode  # they import vLLM

    settings = edge_settings(profile, flags, extra_secrets)
    prepared, plan = prepare_stack(profile, options)
    if on_prepared is not None:
        on_prepared(prepared, plan)
    # Before any bundle is built: each serving object reads the mode once, when it is created.
    mode: Any = options.fingerprint_mode  # vLLM's literal type; the flag's parser checked the value
    set_fingerprint_mode(mode, options.fingerprint_value)
    defaults = options.frontend_settings()
    manager = build_manager(
        prepared,
        bundle_builder(defaults),
        build_renderer=build_renderer,
        admission_timeout=options.admission_timeout,
        memory_plan=plan,
        warm_launcher=warm_launcher,
        costs=CostBook(state_dir()) if options.keep_costs else None,
        probe=probe_model,
    )
    key_ring = KeyRing.of(settings, cli_api_key=flags.api_key)
    return ServingStack(
        profile=prepared, memory_plan=plan, manager=manager, settings=settings, key_ring=key_ring, frontend=defaults
    )
