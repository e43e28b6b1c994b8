"""``turnout serve``: validate the profile, build the manager and the app, and run it under uvicorn."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import logging
import logging.config
import os
import secrets
import sys
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

import click

from server.cli._output import err_console, out_console, print_issues
from server.cli.access_log import exclude_from_access_log
from server.cli.early_checks import early_profile, refuse_taken_port, refuse_unknown_flags
from server.cli.frontend_flags import FrontendFlagError, FrontendFlags, split_frontend_flags, wrap_middleware
from server.cli.key_options import cli_api_key
from server.cli.listener import bind_listener
from server.cli.logging_setup import LOG_FORMAT_OPTION, LoggingSetup, set_up_logging
from server.cli.stack_flags import ADMISSION_TIMEOUT_OPTION, NO_PRELOAD_OPTION, frontend_default_options
from server.cli.tls_refresh import certificate_refresher
from server.profiles import (
    CONFIG_ENV,
    ParserRegistry,
    Profile,
    ValidationResult,
    source_parser_registry,
    validate_profile,
)

if TYPE_CHECKING:
    import socket

    from server.api import ApiSettings, ConnectionLimits, ServingFlags, StackOptions
    from server.engine import MemoryPlan

__all__ = [
    "ServeOptions",
    "listener_or_exit",
    "load_serving_profile",
    "profile_connection_limits",
    "refuse_invalid_profile",
    "run_server",
    "serve",
    "serving_validation",
    "settings_or_exit",
]

logger = logging.getLogger("turnout.cli")


@dataclass(frozen=True, kw_only=True)
class ServeOptions:
    """Everything ``turnout serve`` takes besides the profile (frozen; no ``Namespace``).

    ``engine_defaults`` holds the vLLM engine flags given on the command line, as ``AsyncEngineArgs`` fields;
    ``frontend`` the vLLM frontend flags (``server/cli/frontend_flags.py`` says what each does).
    """

    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = field(default=None, repr=False)
    dev: bool = False
    log_level: str = "info"
    admission_timeout: float | None = None  # None: the manager's default
    enable_auto_tool_choice: bool = False
    tool_call_parser: str | None = None
    chat_template: str | None = None
    reasoning_parser: str | None = None
    generate_admin_token: bool = False
    watch: bool = False
    no_preload: bool = False
    timeout_keep_alive: int | None = None  # None: the profile's server.keep_alive_timeout_s
    engine_defaults: Mapping[str, Any] = field(default_factory=dict)
    frontend: FrontendFlags = field(default_factory=lambda: FrontendFlags(server={}, model_defaults={}))
    api_key_env: str | None = None
    inject_fault: tuple[str, ...] = ()
    log_format: str = "text"
    logging_setup: LoggingSetup | None = None  # None: as set up by the caller (tests), text

    @property
    def stack(self) -> StackOptions:
        """The options that shape the serving stack, as ``assemble_stack`` takes them (a Ray node gets the same)."""
        from server.api import StackOptions

        server = self.frontend.server
        frontend_defaults = {
            "enable_auto_tool_choice": self.enable_auto_tool_choice,
            "tool_call_parser": self.tool_call_parser,
            "chat_template": self.chat_template,
            "reasoning_parser": self.reasoning_parser,
            **self.frontend.model_defaults,
        }
        return StackOptions(
            engine_defaults=self.engine_defaults,
            frontend_defaults=frontend_defaults,
            fingerprint_mode=server.get("fingerprint_mode", "full"),
            fingerprint_value=server.get("fingerprint_value"),
            admission_timeout=self.admission_timeout,
            no_preload=self.no_preload,
        )


class _Validation(Protocol):
    def __call__(self, path: str | None, data: bytes | None = None) -> ValidationResult: ...


def serving_validation(
    default_tool_call_parser: str | None = None, default_enable_auto_tool_choice: bool = False
) -> _Validation:
    """The validation a serving profile gets, at start-up and at every reload: vLLM's live parser registries and
    the CLI's frontend defaults."""
    from server.frontend import parser_registry

    def validate(path: str | None, data: bytes | None = None) -> ValidationResult:
        from server.api import secret_env  # the key variables are read there once withheld from os.environ

        parsers = parser_registry()
        return _validated(path, parsers, default_tool_call_parser, default_enable_auto_tool_choice, data, secret_env())

    return validate


def _validated(
    path: str | None,
    parsers: ParserRegistry,
    default_tool_call_parser: str | None,
    default_enable_auto_tool_choice: bool,
    data: bytes | None = None,
    env: Mapping[str, str] | None = None,
) -> ValidationResult:
    """``path`` validated against ``parsers`` (vLLM's live registries, or its source tables before vLLM is
    imported) with the CLI's frontend defaults (``data``: the file's content, already read)."""
    return validate_profile(
        path,
        parsers=parsers,
        default_tool_call_parser=default_tool_call_parser,
        default_enable_auto_tool_choice=default_enable_auto_tool_choice,
        data=data,
        env=env,
    )


def load_serving_profile(
    path: str | None, default_tool_call_parser: str | None = None, default_enable_auto_tool_choice: bool = False
) -> Profile:
    """The profile, validated like ``turnout validate`` does, with the CLI's frontend defaults; exits 1 printing
    every error."""
    result = serving_validation(default_tool_call_parser, default_enable_auto_tool_choice)(path)
    if result.profile is None:
        _refuse(result)
    for warning in result.warnings:
        logger.warning("%s", warning)
    return result.profile


def refuse_invalid_profile(
    path: str | None, default_tool_call_parser: str | None = None, default_enable_auto_tool_choice: bool = False
) -> None:
    """Exit 1 printing every error when the profile is invalid, before vLLM is imported (that takes seconds).

    The parser names come from vLLM's source tables, which list exactly its live registries (a test holds that),
    so the errors are those :func:`load_serving_profile` would print. Only when no parser plugin is loaded: a
    plugin's names are in the live registries alone. A valid profile is validated again, live, when it is loaded.
    """
    registry = source_parser_registry()
    if registry is None:  # vLLM is not installed: serving fails later, saying so
        return
    result = _validated(path, registry, default_tool_call_parser, default_enable_auto_tool_choice)
    if result.profile is None:
        _refuse(result)
    # Litestar, not vLLM: an unset key variable, or one given twice (VAR and VAR_FILE), is said in well under a second
    from server.api import check_secret_sources, read_keys, secret_env, secret_names

    with _unset_key_exits(result.profile):
        check_secret_sources(secret_names(result.profile))
        read_keys(result.profile, secret_env())


def _refuse(result: ValidationResult) -> NoReturn:
    print_issues([*result.errors, *result.warnings])
    err_console.print(f"[bold red]The profile has {len(result.errors)} error(s); not starting.[/]")
    raise SystemExit(1)


@contextmanager
def _loading_status(model: str) -> Iterator[None]:
    with err_console.status(f"Loading [bold]{model}[/] (engine start-up takes a while on CPU)…"):
        yield
    err_console.print(f"[green]✓[/] {model} is active")


def engine_defaults(
    flags: Mapping[str, Any], reasoning_parser: str | None, frontend: FrontendFlags | None = None
) -> dict[str, Any]:
    """The engine arguments every model gets from the command line: vLLM's engine flags, and the default reasoning
    parser, which the engine needs as well as the frontend (structured output must know where reasoning ends).

    ``--no-enable-flash-late-interaction`` also reaches every engine's pooler config, as vLLM's
    ``propagate_flash_late_interaction`` does (a model whose profile sets its own ``pooler_config`` keeps it).
    """
    defaults = dict(flags)
    if reasoning_parser is not None:
        defaults["reasoning_parser"] = reasoning_parser
    if frontend is not None and frontend.model_defaults.get("enable_flash_late_interaction") is False:
        pooler = defaults.get("pooler_config")
        if pooler is None:
            defaults["pooler_config"] = {"enable_flash_late_interaction": False}  # vLLM converts a mapping
        else:
            # vLLM's parser gave a PoolerConfig, whose validator refuses replace(); vLLM sets the field as here.
            pooler = copy.copy(pooler)
            pooler.enable_flash_late_interaction = False
            defaults["pooler_config"] = pooler
    return defaults


@contextmanager
def _refused_stack(profile: Profile) -> Iterator[None]:
    """Exit 1 naming what is wrong when the profile's stack cannot be assembled (``assemble_stack``)."""
    from server.engine import EngineConfigInvalid, MemoryBudgetExceeded, StrategyUnavailable

    try:
        with _unset_key_exits(profile):
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


def _report_plan(prepared: Profile, plan: MemoryPlan | None, as_log: bool) -> None:
    """Print the KV-cache plan (one log record with ``--log-format json``), or log that there is none."""
    if plan is None:
        logger.info("KV caches are not budgeted on this device; vLLM's own defaults apply")
        return
    from server.cli.plan_report import build_plan_report, render_plan

    report = build_plan_report(prepared, platform=plan.memory.device, memory=plan.memory, env=os.environ)
    lines = render_plan(report, plan)  # one block: the KV-cache plan's figures are in it
    if as_log:  # --log-format json: one record (one JSON line) holds the block
        logger.info("%s", "\n".join(lines))
    else:
        click.echo("\n".join(lines))


def settings_or_exit(profile: Profile, flags: ServingFlags) -> ApiSettings:
    """The app's settings from ``profile``, this environment and ``flags`` (``serving_settings.api_settings``);
    exits 1 naming a ``server.api_keys`` variable that is not set."""
    from server.api import api_settings, secret_env

    with _unset_key_exits(profile):
        settings = api_settings(profile, flags, secret_env())
    return settings


@contextmanager
def _unset_key_exits(profile: Profile) -> Iterator[None]:
    """Exit 1 naming the ``server.api_keys`` variable that is not set, or a secret given both as ``VAR`` and
    ``VAR_FILE`` (one line: ``file: error: ...``)."""
    from server.api import KeyNotSet, SecretSourceInvalid

    try:
        yield
    except (KeyNotSet, SecretSourceInvalid) as exc:
        err_console.print(f"{profile.path}: error: {exc}", markup=False)
        raise SystemExit(1) from None


def run_server(profile: Profile, options: ServeOptions) -> None:
    """Assemble the serving stack of ``profile`` (``server.api.assemble_stack``, as each Ray node does), build the
    app over it and serve until interrupted."""
    import msgspec
    import uvicorn

    from server.api import (
        LOOPBACK_HOSTS,
        KeyRing,
        Reloader,
        ServingFlags,
        assemble_stack,
        create_app,
        limited_protocol,
        prepare_stack,
        watch_profile,
    )
    from server.frontend import request_body_schemas

    setup = options.logging_setup
    as_log = setup is not None and setup.json
    server_flags = options.frontend.server
    flags = ServingFlags(
        api_key=options.api_key,
        host=options.host,
        machine_names=True,
        dev=options.dev,
        cors=options.frontend.cors(),
        sse_keep_alive_interval_s=float(server_flags.get("sse_keep_alive_interval", 0) or 0),
        enable_tokenizer_info_endpoint=bool(server_flags.get("enable_tokenizer_info_endpoint")),
        enable_request_id_headers=bool(server_flags.get("enable_request_id_headers")),
    )
    uvicorn_options: dict[str, Any] = {"log_level": options.log_level, **options.frontend.uvicorn_options()}
    if setup is not None:  # uvicorn's lines in the same format
        uvicorn_options.setdefault("log_config", setup.uvicorn_config())
    sockets: list[socket.socket] | None = None

    def prepared(served: Profile, plan: MemoryPlan | None) -> None:
        nonlocal sockets
        _report_plan(served, plan, as_log)
        # Bound once vLLM accepted the engine arguments, before the engine launcher starts with the manager.
        sockets = None if "uds" in uvicorn_options else [listener_or_exit(options.host, options.port)]

    if options.generate_admin_token:  # the state folder its file goes to is refused before any engine starts
        from server.cli.admin_token import open_state_folder

        open_state_folder()
    stack_options = options.stack
    with _refused_stack(profile):
        # The secrets leave os.environ first, before any process (the launcher included) starts with a copy of it.
        stack = assemble_stack(
            profile,
            stack_options,
            flags,
            extra_secrets=[options.api_key_env],
            on_prepared=prepared,
            warm_launcher=True,
        )
    profile, memory_plan, manager, settings = stack.profile, stack.memory_plan, stack.manager, stack.settings
    admin_token_env = settings.admin_token_env
    if settings.admin_token is None and options.generate_admin_token:
        from server.cli.admin_token import keep_generated_token

        generated = secrets.token_urlsafe(24)
        keep_generated_token(generated, admin_token_env, as_log=as_log)  # its path, never the token
        settings = dataclasses.replace(settings, admin_token=generated)

    def warn(message: str) -> None:
        if as_log:
            logger.warning("%s", message)
        else:
            err_console.print(message, style="yellow", markup=False)

    if settings.admin_token is None and not settings.dev_mode:
        warn(f"Admin routes are disabled: set {admin_token_env} (or {admin_token_env}_FILE) or pass --dev.")
    for message in options.frontend.cors_warnings():
        warn(message)
    if profile.server.allowed_hosts is None and settings.allowed_hosts not in (None, LOOPBACK_HOSTS):
        names = ", ".join(settings.allowed_hosts or ())
        warn(
            f"server.allowed_hosts is not set: bound to {options.host}, the server answers only this machine's "
            f"names and addresses ({names}); list in server.allowed_hosts the names clients use besides these "
            "(a DNS alias, a proxy's name)."
        )

    def prepare_reloaded(new: Profile) -> tuple[Profile, MemoryPlan | None]:
        # The same command-line defaults, and the start-up memory reading: the engines running now are part of
        # what the budget already counts. switching.* applies only at a restart, so the residency stays too.
        memory = memory_plan.memory if memory_plan is not None else None
        running = msgspec.structs.replace(new, switching=profile.switching)
        return prepare_stack(running, stack_options, memory=memory)

    validation = serving_validation(options.tool_call_parser, options.enable_auto_tool_choice)
    # One ring for the app and the reloader: a reload that changes the keys applies them from the next request.
    key_ring = KeyRing.of(settings, cli_api_key=options.api_key)
    reloader = Reloader(manager, profile, validation, prepare=prepare_reloaded, key_ring=key_ring)

    async def watch() -> None:
        await watch_profile(reloader)

    async def refresh_tls() -> None:
        # `config` is bound below, before the server (and so this background task) starts.
        await certificate_refresher(config)()

    background = [watch] if options.watch else []
    if options.frontend.server.get("enable_ssl_refresh"):
        background.append(refresh_tls)

    app = create_app(
        manager,
        settings,
        default_model=profile.default_model,
        loading_status=setup.loading_status(_loading_status) if setup is not None else _loading_status,
        reloader=reloader,
        background=background,
        request_schemas=request_body_schemas(),
        key_ring=key_ring,
    )
    if setup is not None:  # Litestar's app set up its own logging (root handler, format): back to the one format
        logging.config.dictConfig(setup.uvicorn_config())
    scheme = "https" if "ssl_certfile" in uvicorn_options else "http"
    try:
        served = wrap_middleware(app, list(options.frontend.server.get("middleware", [])))
    except FrontendFlagError as exc:
        err_console.print(f"error: {exc}", markup=False)
        raise SystemExit(2) from None
    exclude_from_access_log(options.frontend.access_log_exclusions())
    where = f"unix:{uvicorn_options['uds']}" if "uds" in uvicorn_options else f"{options.host}:{options.port}"
    serving = (
        f"Turnout serving {', '.join(profile.models)} on {scheme}://{where} "
        f"(default {profile.default_model}, strategy {manager.strategy_name}, mode {profile.switching.mode})"
    )
    if as_log:
        logger.info("%s", serving)
    else:
        out_console.print(serving)
    drain_timeout = profile.switching.drain_timeout
    limits = profile_connection_limits(profile)
    # uvloop and httptools (dependencies of Turnout) rather than asyncio and h11: less CPU per request; the
    # httptools protocol with Turnout's header and body timeouts and connection cap (api/connection_limits.py).
    config = uvicorn.Config(
        served,
        host=options.host,
        port=options.port,
        loop="uvloop",
        http=limited_protocol(limits),
        timeout_keep_alive=options.timeout_keep_alive or profile.server.keep_alive_timeout_s,
        **uvicorn_options,
        # A backstop only: the manager's drain ends every request by then (plus the time a stream needs to
        # send its error event).
        timeout_graceful_shutdown=int(drain_timeout + _DRAIN_SLACK_S),
    )
    from server.vllm_plugin import close_kv_pool

    def on_exit() -> None:
        close_kv_pool()
        if setup is not None:
            setup.remove()  # a SIGTERM ends the process without atexit

    _draining_server_class()(config, manager.drain, drain_timeout, on_exit).run(sockets=sockets)


#: Seconds past the drain timeout that uvicorn waits for the ended requests to leave before it cancels them.
_DRAIN_SLACK_S = 15.0
#: File descriptors the server needs besides its client connections (engines' pipes and sockets, logs, models).
_FD_RESERVE = 256


def profile_connection_limits(profile: Profile) -> ConnectionLimits:
    """The HTTP server's header timeout and connection cap (``server.*``; ``turnout ray-serve``'s ingress takes
    them too); warns when the open-file limit would refuse connections before the cap does (accept then fails,
    and nobody, health checks included, gets in)."""
    import resource

    from server.api import ConnectionLimits

    server = profile.server
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and server.max_connections + _FD_RESERVE > soft:
        logger.warning(
            "server.max_connections is %d but the open-file limit (ulimit -n) is %d: raise the limit to at least "
            "%d, or lower max_connections",
            server.max_connections,
            soft,
            server.max_connections + _FD_RESERVE,
        )
    return ConnectionLimits.of(server)


def listener_or_exit(host: str, port: int) -> socket.socket:
    """The bound socket (``listener.bind_listener``): before any engine loads; exit 1 in one line if it cannot."""
    try:
        return bind_listener(host, port)
    except OSError as exc:
        err_console.print(f"error: cannot listen on {host}:{port}: {exc.strerror or exc}; not starting.", markup=False)
        raise SystemExit(1) from None


def _draining_server_class() -> type:
    import uvicorn

    class DrainingServer(uvicorn.Server):
        """uvicorn's server, whose graceful shutdown (SIGTERM, SIGINT) drains the manager's requests.

        uvicorn stops accepting connections and waits for the open ones; meanwhile the manager refuses new
        requests on them (503 ``server_shutting_down``), gives the ones in flight the drain timeout, and ends
        the rest with an error (a stream's error event and ``[DONE]``). Then the lifespan stops the engines.
        """

        def __init__(
            self,
            config: Any,
            drain: Callable[[float], Coroutine[Any, Any, int]],
            timeout: float,
            on_exit: Callable[[], None],
        ) -> None:
            super().__init__(config)
            self._drain, self._timeout, self._on_exit = drain, timeout, on_exit

        @contextmanager
        def capture_signals(self) -> Iterator[None]:
            # ``on_exit`` (the kept-KV pool's removal) runs after the lifespan stopped the engines and before
            # uvicorn re-raises a SIGTERM it caught, which ends the process without ``atexit``.
            with super().capture_signals():
                try:
                    yield
                finally:
                    self._on_exit()

        async def shutdown(self, sockets: Any = None) -> None:
            draining = asyncio.create_task(self._drain(self._timeout))
            try:
                await super().shutdown(sockets)
            finally:
                ended = await draining
                if ended:
                    logger.warning("shutdown: %d request(s) outlived the drain timeout and were ended", ended)

    return DrainingServer


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED, metavar="[PROFILE] [VLLM FLAGS]...")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8000, show_default=True, type=int, help="Port to bind.")
@click.option(
    "--api-key-env",
    default=None,
    metavar="NAME",
    help="Require the key held by the variable NAME on /v1/* (default: the profile's api_key_env, then VLLM_API_KEY).",
)
@click.option(
    "--api-key-file", default=None, metavar="PATH", help="Require the key in this file (its first line) on /v1/*."
)
@click.option("--dev", is_flag=True, help="Open the admin routes without a token (trusted networks only).")
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["critical", "error", "warning", "info", "debug"]),
)
@ADMISSION_TIMEOUT_OPTION
@frontend_default_options
@click.option(
    "--watch", is_flag=True, help="Reload when the profile (or a chat template it names) is saved, as turnout reload."
)
@NO_PRELOAD_OPTION
@click.option(
    "--timeout-keep-alive",
    default=None,
    type=click.IntRange(min=1),
    # The profile's server.keep_alive_timeout_s says why its default is 65 s, not uvicorn's 5.
    help="Seconds an idle keep-alive connection stays open (default: the profile's server.keep_alive_timeout_s, "
    "65; keep it above your clients' and proxies' idle timeouts).",
)
@click.option(
    "--inject-fault",
    multiple=True,
    metavar="KIND:MODEL",
    help="Arm a fault for tests and drills (repeatable): weights:MODEL (MODEL's next in-place load negates a "
    "weight; the switch's proof catches it), kv:MODEL (its kept KV blocks are read back with flipped bytes; their "
    "digests refuse them). Never in production.",
)
@LOG_FORMAT_OPTION
@click.pass_context
def serve(ctx: click.Context, /, args: tuple[str, ...], **kwargs: Any) -> None:
    """Serve PROFILE (default: $VLLM_HPU_MULTI_MODEL_CONFIG) as an OpenAI-compatible server.

    Any vLLM engine flag (--max-model-len, --max-num-batched-tokens, --dtype, ...) is a default for every
    model; a model's own profile key overrides it. vLLM's frontend flags work as in `vllm serve`: TLS
    (--ssl-keyfile, --ssl-certfile, ...), CORS (--allowed-origins, ...), --root-path, --middleware,
    --tool-parser-plugin, and per-model defaults (--response-role, --chat-template-content-format, ...). A flag
    that cannot apply to a multi-model server is refused with the reason.
    """
    own = [option for param in ctx.command.params for option in param.opts if option.startswith("-")]
    # Flags, profile, key variables and port before vLLM is imported (seconds): each fails at once, in one line.
    refuse_unknown_flags(args, own)
    positionals = early_profile(args)
    if positionals is not None:  # none to tell before vLLM's parser runs, or a parser plugin to load first
        refuse_invalid_profile(
            _profile_path(positionals), kwargs["tool_call_parser"], kwargs["enable_auto_tool_choice"]
        )
    from server.api import secret_env  # --api-key-env NAME: NAME, else the file NAME_FILE names

    api_key = cli_api_key(kwargs["api_key_env"], kwargs.pop("api_key_file"), secret_env())
    refuse_taken_port(args, kwargs["host"], kwargs["port"])
    # Before vLLM is imported: it sets up its logging (from the file this names) when it is imported.
    setup = set_up_logging(kwargs["log_format"], kwargs["log_level"])
    from server.engine import EngineFlagsInvalid, parse_engine_flags
    from server.frontend import load_parser_plugins, parse_frontend_flags

    try:
        given, rest = parse_frontend_flags(args)
        frontend = split_frontend_flags(given)
        flags = parse_engine_flags(rest, own_options=own)
        # Before the profile is validated, so that the plugins' parser names are valid in it.
        load_parser_plugins(
            tool_parser_plugin=frontend.server.get("tool_parser_plugin"),
            reasoning_parser_plugin=flags.defaults.get("reasoning_parser_plugin"),
        )
    except (EngineFlagsInvalid, ValueError) as exc:
        raise click.UsageError(str(exc)) from None
    profile = _profile_path(flags.positionals)
    _arm_faults(kwargs["inject_fault"])
    if frontend.model_defaults.get("enable_log_outputs") and not flags.defaults.get("enable_log_requests"):
        raise click.UsageError("--enable-log-outputs requires --enable-log-requests (as in vllm serve)")
    options = ServeOptions(
        **kwargs,
        api_key=api_key,
        engine_defaults=engine_defaults(flags.defaults, kwargs["reasoning_parser"], frontend),
        frontend=frontend,
        logging_setup=setup,
    )
    # Profile validation says which model would get auto tool choice without a parser (one rule, one place).
    run_server(
        load_serving_profile(profile, options.tool_call_parser, options.enable_auto_tool_choice),
        options,
    )


def _arm_faults(faults: Sequence[str]) -> None:
    """Arm each ``--inject-fault KIND:MODEL`` in this server, with a warning (before the profile is prepared: a
    ``kv`` fault goes into the model's engine arguments)."""
    from server.engine import FAULTS, parse_fault

    for text in faults:
        try:
            kind, model = parse_fault(text)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
        FAULTS.arm(kind, model)
        logger.warning("fault drill: %s is armed (--inject-fault); this server answers wrong on purpose", text)


def _profile_path(positionals: Sequence[str]) -> str | None:
    """The PROFILE argument (``None``: ``$VLLM_HPU_MULTI_MODEL_CONFIG`` names it); a usage error without either."""
    if len(positionals) > 1:
        raise click.UsageError(f"give one PROFILE file, got {len(positionals)}: {' '.join(positionals)}")
    profile = positionals[0] if positionals else None
    if profile is None and not os.environ.get(CONFIG_ENV):
        raise click.UsageError(f"Give a PROFILE file or set {CONFIG_ENV}.")
    return profile


if __name__ == "__main__":  # pragma: no cover - vLLM spawns processes: entry points must be guarded
    serve(sys.argv[1:])
