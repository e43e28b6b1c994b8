"""``turnout serve``'s HTTP server: the stack source's app under uvicorn (uvloop, httptools with Turnout's
connection limits), its listener, and a graceful shutdown that drains the manager's requests."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import logging.config
import os
import secrets
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click

from server.cli._output import err_console, out_console
from server.cli.access_log import exclude_from_access_log
from server.cli.frontend_flags import FrontendFlagError, wrap_middleware
from server.cli.listener import bind_listener
from server.cli.profile_checks import refused_stack
from server.cli.serve_options import ServeOptions
from server.cli.tls_refresh import certificate_refresher
from server.profiles import Profile

if TYPE_CHECKING:
    import socket

    from server.api import ConnectionLimits, StackSource
    from server.engine import MemoryPlan

__all__ = ["draining_server_class", "listener_or_exit", "profile_connection_limits", "run_server"]

logger = logging.getLogger("turnout.cli")


@contextmanager
def _loading_status(model: str) -> Iterator[None]:
    with err_console.status(f"Loading [bold]{model}[/] (engine start-up takes a while on CPU)…"):
        yield
    err_console.print(f"[green]✓[/] {model} is active")


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


def run_server(source: StackSource, options: ServeOptions) -> None:
    """Assemble the serving stack of ``source``'s profile (loaded: ``load_serving_profile``), as each Ray node
    does, build the app over it and serve until interrupted."""
    import uvicorn

    from server.api import LOOPBACK_HOSTS, limited_protocol, watch_profile
    from server.frontend import request_body_schemas

    setup = options.logging_setup
    as_log = setup is not None and setup.json
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
    with refused_stack(source.require()):
        # The secrets leave os.environ first, before any process (the launcher included) starts with a copy of it.
        stack = source.assemble(on_prepared=prepared, warm_launcher=True)
    profile, manager, settings = stack.profile, stack.manager, stack.settings
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

    # Each reload is loaded and readied by the same source, and changes the keys of the stack's one key ring.
    reloader = source.reloader()

    async def watch() -> None:
        await watch_profile(reloader)

    async def refresh_tls() -> None:
        # `config` is bound below, before the server (and so this background task) starts.
        await certificate_refresher(config)()

    background = [watch] if options.watch else []
    if options.frontend.server.get("enable_ssl_refresh"):
        background.append(refresh_tls)

    app = source.app(
        reloader=reloader,
        settings=settings,
        loading_status=setup.loading_status(_loading_status) if setup is not None else _loading_status,
        background=background,
        request_schemas=request_body_schemas(),
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
    # httptools protocol with Turnout's header and body timeouts and connection cap
    # (api/admission/connection_limits.py).
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

    draining_server_class()(config, manager.drain, drain_timeout, on_exit).run(sockets=sockets)


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


def draining_server_class() -> type:
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
