"""``turnout ray-serve``: the profile's node replicas and the OpenAI ingress on Ray Serve.

Locally (the default) it starts a Ray cluster on this machine with one ``turnout_accel`` resource per replica, so
each replica owns one accelerator set, with Ray's token authentication on (``ray_auth.py``); ``--address`` joins a
running cluster instead. A real cluster (KubeRay) deploys the same application from a Ray Serve config file
(docs/deploy.md: "Ray Serve").

A local cluster's processes (Ray's own and every replica) start with a copy of this process's environment. So the
secrets are handed over as files: each is written (mode 0600) into a fresh private folder of this run in the state
folder, removed at exit; the replicas get only ``VAR_FILE`` (the path) in their runtime environment, and the values
leave ``os.environ`` before ``ray.init`` (``server.api.secrets_as_files``).
"""

from __future__ import annotations

import atexit
import os
from pathlib import Path

import click

from server.cli._output import err_console, out_console
from server.cli.profile_checks import load_serving_profile, refuse_invalid_profile, settings_or_exit
from server.cli.ray_auth import installed_ray_version, local_ray_auth, private_token_file
from server.cli.serve_options import ServeOptions, engine_defaults
from server.cli.stack_flags import ADMISSION_TIMEOUT_OPTION, NO_PRELOAD_OPTION, frontend_default_options
from server.cli.uvicorn_server import listener_or_exit
from server.cluster import ACCELERATOR, MAX_ONGOING_REQUESTS, node_options
from server.engine import StateDir, state_dir
from server.profiles import Profile

__all__ = ["ray_serve"]

#: The Serve application's name (its cluster registry is named after it).
APPLICATION = "turnout"


@click.command("ray-serve")
@click.argument("profile", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--replicas", default=1, show_default=True, type=click.IntRange(min=1), help="Node replicas.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address the ingress binds.")
@click.option("--port", default=8000, show_default=True, type=int, help="Port the ingress binds.")
@click.option(
    "--address", default="local", show_default=True, help="Ray cluster to join ('local' starts one on this machine)."
)
@click.option("--num-gpus", default=0.0, show_default=True, type=float, help="GPUs per replica (CUDA).")
@click.option(
    "--max-ongoing-requests",
    default=MAX_ONGOING_REQUESTS,
    show_default=True,
    type=click.IntRange(min=1),
    help="Concurrent requests per replica; past it a model's requests spill to another replica.",
)
@click.option("--dev", is_flag=True, help="Open the admin routes without a token (trusted networks only).")
@ADMISSION_TIMEOUT_OPTION
@frontend_default_options
@NO_PRELOAD_OPTION
def ray_serve(
    profile: Path,
    replicas: int,
    host: str,
    port: int,
    address: str,
    num_gpus: float,
    max_ongoing_requests: int,
    dev: bool,
    admission_timeout: float | None,
    enable_auto_tool_choice: bool,
    tool_call_parser: str | None,
    chat_template: str | None,
    reasoning_parser: str | None,
    no_preload: bool,
) -> None:
    """Serve PROFILE on Ray Serve: REPLICAS node replicas, each running Turnout's engine manager, behind one
    OpenAI ingress that routes each request to a replica holding its model. Ctrl-C stops everything.

    The frontend defaults, --admission-timeout and --no-preload reach every replica as under `turnout serve`.
    The ingress is served from this process under the profile's server.* connection limits, as `turnout serve`.
    """
    options = ServeOptions(
        host=host,
        dev=dev,
        admission_timeout=admission_timeout,
        enable_auto_tool_choice=enable_auto_tool_choice,
        tool_call_parser=tool_call_parser,
        chat_template=_replica_path(chat_template),
        reasoning_parser=reasoning_parser,
        no_preload=no_preload,
        engine_defaults=engine_defaults({}, reasoning_parser),
    )
    from server.api import ServingFlags, SourceOptions, StackSource

    # The ingress's own check and load; each replica loads the profile again with these options, in its process.
    source = StackSource(SourceOptions(path=str(profile), stack=options.stack, flags=ServingFlags(dev=dev)))
    refuse_invalid_profile(source)  # before Ray and vLLM are imported (seconds)
    ray_version = installed_ray_version()
    local = address == "local"
    if local and ray_version is not None:  # before Ray is imported: it reads its authentication mode on import
        _token_auth(ray_version)
    try:
        import ray
        from ray import serve
    except ImportError:
        err_console.print("ray-serve needs the ray extra: pip install -e '.[ray]'", markup=False)
        raise SystemExit(1) from None
    from server.cli.ray_ingress import run_ingress
    from server.cluster import node_application

    loaded = load_serving_profile(source).require()
    path = str(profile.resolve())
    secret_files: dict[str, str] = {}
    if local:  # the local replicas read this environment: a key variable left unset stops here, not in Ray
        settings_or_exit(loaded, ServingFlags(dev=dev))
        secret_files = _secrets_as_files(loaded)
    listener = listener_or_exit(host, port)  # a taken port fails before the cluster starts
    try:
        ray.init(
            address=address,
            include_dashboard=False,
            # A local cluster gets one accelerator set per replica; a real cluster's nodes declare their own.
            resources={ACCELERATOR: replicas} if local else None,
            # Paths only: every process of the job (the replicas, the ingress) reads its secrets from these files.
            runtime_env={"env_vars": secret_files} if secret_files else None,
        )
    except BaseException:
        listener.close()  # the port is not left bound (nor an unclosed socket) when the cluster does not start
        raise
    try:
        # Ray's HTTP proxy takes no header timeout or connection cap: this process serves the ingress instead.
        serve.start(proxy_location="Disabled")
        served = node_options(path, dev=dev, host=host, stack=options.stack)
        application = node_application(
            replicas=replicas,
            options=served,
            num_gpus=num_gpus,
            resources={ACCELERATOR: 1},
            max_ongoing_requests=max_ongoing_requests,
            max_queued_requests=loaded.switching.max_queue,  # one node's bound on waiting requests
        )
        serve.run(application, name=APPLICATION, route_prefix=None)
        out_console.print(
            f"Turnout on Ray Serve: {replicas} replica(s) of {', '.join(loaded.models)} on http://{host}:{port}"
        )
        run_ingress(APPLICATION, served, loaded, listener)
    finally:
        listener.close()
        serve.shutdown()  # type: ignore[no-untyped-call]  # ray leaves it unannotated
        if local:
            ray.shutdown()


def _secrets_as_files(profile: Profile) -> dict[str, str]:
    """``{VAR_FILE: path}`` of the secrets written into this run's private folder in the state folder (removed at
    exit), the values then out of ``os.environ`` (``server.api.secrets_as_files``); exits 1 when it cannot."""
    from server.api import secrets_as_files

    try:
        folder = state_dir().run_folder("ray-secrets")
    except OSError as exc:
        err_console.print(f"error: cannot hand the replicas their secrets: {exc}; not starting.", markup=False)
        raise SystemExit(1) from None
    atexit.register(state_dir().remove_folder, folder)  # Ctrl-C and SIGTERM end this process normally
    return secrets_as_files(profile, StateDir(folder))


def _replica_path(chat_template: str | None) -> str | None:
    """``--chat-template`` as a replica reads it: a file named relative to here becomes absolute (a replica runs
    in another folder); a bundled template's name or an inline template is left as given."""
    if chat_template is None or not Path(chat_template).is_file():
        return chat_template
    return str(Path(chat_template).resolve())


def _token_auth(ray_version: str) -> None:
    """Turn Ray's token authentication on for the local cluster (``ray_auth.py``), or say why it is off."""
    auth = local_ray_auth(ray_version, os.environ)
    if auth.warning:
        err_console.print(f"warning: {auth.warning}", markup=False)
        return
    os.environ.update(auth.env)
    token_file = Path.home() / ".ray" / "auth_token"
    if private_token_file(os.environ, token_file) is not None:
        out_console.print(f"Ray's token authentication is on; its token is in {token_file} (mode 0600)", markup=False)
    elif token_file.is_file() and token_file.stat().st_mode & 0o077:
        err_console.print(f"warning: {token_file} (Ray's token) is readable by other users: chmod 600 it", markup=False)
