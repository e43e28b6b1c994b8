"""The profile schema: a family of small frozen msgspec Structs.

The docstrings of the fields double as the profile reference (the docs site's reference page and ``turnout schema``
are generated from them: ``json_schema.py``). Loading and position-aware error reporting live in ``loader.py``;
these Structs only say what a valid, resolved profile is.

A profile is a YAML or JSON file. Unquoted ``yes``/``no``/``on``/``off`` are booleans, as in the YAML 1.1
that vLLM-Gaudi's PyYAML reads, so its configs load unchanged. Top-level keys that start with ``x-`` are
ignored: they are a place for YAML anchors that models merge with ``<<: *name``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, Struct

__all__ = [
    "CHAT_FRONTEND_KEYS",
    "DEFAULT_ADMIN_TOKEN_ENV",
    "DEFAULT_API_KEY_ENV",
    "FRONTEND_KEYS",
    "FRONTEND_SETTING_KEYS",
    "MEMORY_SIZE_PATTERN",
    "REQUEST_BOUND_KEYS",
    "RESIDENCY_KEYS",
    "ApiKeyScope",
    "ChatTemplateContentFormat",
    "DisabledThinkingEffort",
    "ModelProfile",
    "Profile",
    "ServerSection",
    "StrategyName",
    "SwitchMode",
    "Switching",
    "ToolStrictLevel",
    "VerifyMode",
]

NonNegativeFloat = Annotated[float, Meta(ge=0)]
PositiveFloat = Annotated[float, Meta(gt=0)]
PositiveInt = Annotated[int, Meta(ge=1)]
SwitchMode = Literal["manual", "auto"]
StrategyName = Literal["auto", "stop", "keep", "sleep", "reconfigure", "stash"]
EvictionRule = Literal["cost", "lru"]
SleepLevel = Literal[1, 2]
VerifyMode = Literal["fast_paths", "always", "off"]
#: A size with its unit: binary ``KiB``/``MiB``/``GiB``/``TiB``, decimal ``KB``/``MB``/``GB``/``TB``, or ``B``.
MEMORY_SIZE_PATTERN = r"^\s*[0-9]+(\.[0-9]+)?\s*([KMGT]i?B|B)\s*$"
MemorySize = Annotated[str, Meta(pattern=MEMORY_SIZE_PATTERN)]
DeviceFraction = Annotated[float, Meta(gt=0, le=1)]
ChatTemplateContentFormat = Literal["auto", "string", "openai"]
"""How message `content` is handed to the chat template (vLLM's `--chat-template-content-format`)."""
ToolStrictLevel = Literal["auto", "function", "parameter"]
"""The server-side floor of structural-tag tool calling (vLLM's `--tool-strict-level`)."""
DisabledThinkingEffort = Literal["auto", "none", "low", "medium", "high", "xhigh", "max"]
"""The reasoning effort of a Messages request with thinking disabled (`--anthropic-disabled-thinking-effort`)."""

DEFAULT_ADMIN_TOKEN_ENV = "TURNOUT_ADMIN_TOKEN"
DEFAULT_API_KEY_ENV = "TURNOUT_API_KEY"

#: Per-model keys that are also vLLM frontend flags of ``turnout serve`` (the flag is their default for every model);
#: a new frontend bundle applies a change of any of them at once.
CHAT_FRONTEND_KEYS = (
    "response_role",
    "chat_template_content_format",
    "default_chat_template_kwargs",
    "trust_request_chat_template",
    "return_tokens_as_token_ids",
    "exclude_tools_when_tool_choice_none",
    "enable_prompt_tokens_details",
    "enable_force_include_usage",
    "trust_request_mm_kwargs",
    "tool_strict_level",
    "enable_per_request_metrics",
    "enable_log_outputs",
    "enable_log_deltas",
    "anthropic_disabled_thinking_effort",
)
#: Per-model keys that feed a model's frontend settings (``server/frontend/settings.py``); the profile's value wins
#: over the server's CLI default. A new frontend bundle applies a change of any of them at once.
FRONTEND_SETTING_KEYS = (
    "enable_auto_tool_choice",
    "tool_call_parser",
    "chat_template",
    "reasoning_parser",
    "lora_modules",
    *CHAT_FRONTEND_KEYS,
)
#: Per-model keys that say how long a model stays loaded and how much it serves at once (the engine layer reads them).
RESIDENCY_KEYS = ("pinned", "preload", "idle_unload_s", "max_concurrent_requests")
#: Per-model keys that bound what one request may ask for (the API checks them before admission).
REQUEST_BOUND_KEYS = ("max_n", "max_best_of", "max_batch_prompts")
#: Per-model keys that are Turnout's, not vLLM's engine's. Every other key goes to ``AsyncEngineArgs``.
FRONTEND_KEYS = frozenset(
    {*FRONTEND_SETTING_KEYS, *RESIDENCY_KEYS, *REQUEST_BOUND_KEYS, "served_model_name", "quant_config"}
)


class Base(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Base of every profile Struct: immutable, keyword-only, and strict about unknown keys.

    msgspec applies ``kw_only`` only to the fields of the class that sets it, and mypy does not see ``frozen``
    as inherited, so each subclass repeats both.
    """


class ModelProfile(Base, frozen=True, kw_only=True):
    """One model of a profile.

    Attributes:
        model: A local model folder (must hold ``config.json``) or a hub id. Relative folders resolve against
            the profile file's folder when they exist there.
        enable_auto_tool_choice: Let the model decide to call tools (``tool_choice: auto``). Needs
            ``tool_call_parser``. Unset means "the server's CLI default".
        tool_call_parser: A tool parser registered in vLLM (``hermes``, ``llama3_json``, ...).
        chat_template: A jinja2 chat template file; a relative path resolves against the profile's folder.
        reasoning_parser: A reasoning parser registered in vLLM (``deepseek_r1``, ``qwen3``, ...).
        quant_config: An INC/FP8 quantization JSON file (exported to the engine as ``QUANT_CONFIG``). Absent
            means "none": it is never inherited from the previously active model.
        response_role: The role of generated messages (vLLM's ``--response-role``; default ``assistant``).
        chat_template_content_format: How message content reaches the template: ``auto`` (vLLM detects it),
            ``string`` or ``openai`` (vLLM's ``--chat-template-content-format``).
        default_chat_template_kwargs: Keyword arguments for every render of the chat template, for example
            ``{enable_thinking: false}``; a request's ``chat_template_kwargs`` win.
        trust_request_chat_template: Accept a chat template sent in the request.
        return_tokens_as_token_ids: Logprobs name tokens as ``token_id:N``.
        exclude_tools_when_tool_choice_none: Leave tools out of the prompt when ``tool_choice`` is ``none``.
        enable_prompt_tokens_details: Report cached prompt tokens in ``usage.prompt_tokens_details``.
        enable_force_include_usage: Include usage in every response, streamed ones too.
        trust_request_mm_kwargs: Accept a request's ``mm_processor_kwargs`` and ``media_io_kwargs`` (vLLM's
            ``--trust-request-mm-kwargs``; off, non-empty ones get a 400).
        tool_strict_level: The floor of structural-tag tool calling: ``auto``, ``function`` or ``parameter``
            (vLLM's ``--tool-strict-level``).
        enable_per_request_metrics: Include per-request timing metrics in answers (vLLM's
            ``--enable-per-request-metrics``).
        enable_log_outputs: Log generated outputs; needs the engine flag ``--enable-log-requests`` (vLLM's
            ``--enable-log-outputs``).
        enable_log_deltas: With ``enable_log_outputs``, also log streamed deltas (default on).
        anthropic_disabled_thinking_effort: The reasoning effort of a Messages request with thinking disabled:
            ``auto``, ``none``, ``low``, ``medium``, ``high``, ``xhigh`` or ``max``.
        served_model_name: Other names clients may use for this model (one or a list, as vLLM's
            ``--served-model-name``); answers carry the name the client asked for, and ``/v1/models`` lists each.
            The model's key in ``models`` stays its own name (the one switches and the status use).
        pinned: Keep the model resident once it is loaded: ``keep`` never evicts it to make room (least recently
            used or memory pressure), and the idle timer never unloads it.
        priority: Which model comes first when several want the device (an integer, default 0; a lower value
            comes first, as vLLM's request ``priority``): in auto mode the waiting model with the lowest value is
            switched to next, and among the idle residents the highest value is evicted first. It never makes a
            request time out: a waiter that would otherwise miss ``switching.max_wait_s`` is served first whatever
            its priority (``docs/switching.md``).
        preload: Load the model (resident, not active) once the default model serves, within the strategy's
            residency limits; readiness does not wait for it, and a preload that fails shows in the status like
            any failed load. Needs a strategy that holds several engines (``keep``).
        idle_unload_s: Seconds a resident model may serve nothing before its engine is unloaded (default:
            ``switching.idle_unload_s``; unset: never). Health, status and metrics calls never count as use. In
            manual mode the active model is never unloaded by the timer; in auto mode it may be, and its next
            request loads it again.
        max_concurrent_requests: Most requests the model serves at once; past it requests wait in the model's
            queue (up to ``switching.max_queue``, then 429 with ``Retry-After``). Unset: no limit of Turnout's.
        lora_modules: LoRA adapters of this model: adapter name to a PEFT adapter folder (``adapter_config.json``
            and ``adapter_model.safetensors``), as vLLM's ``--lora-modules name=path``; a relative folder resolves
            against the profile's folder. A request whose ``model`` is an adapter's name is served by this
            model's engine with the adapter applied (in auto mode it switches to this model), and
            ``/v1/models`` lists each adapter with ``parent`` set to this model. Needs the engine argument
            ``enable_lora: true``; vLLM's other LoRA engine arguments (``max_loras``, ``max_lora_rank``,
            ``max_cpu_loras``, ``lora_dtype``, ...) are engine arguments like any other. An adapter name must
            differ from every model name, alias and other adapter.
        max_n: The largest ``n`` (choices per prompt; beam width with ``use_beam_search``) a request to this model
            may ask for; default 128, OpenAI's own bound. A request past it gets 400 naming ``n`` at once, before
            it waits for the device or moves it (vLLM has no bound of its own). To change every model's bound,
            set it in an ``x-`` anchor that the models merge.
        max_best_of: The largest ``best_of`` (candidates generated per prompt) a request may ask for; default 128,
            as ``max_n``. Checked the same way.
        max_batch_prompts: The most prompts one request may carry: the items of a batch field (``prompt`` and
            ``input`` lists of strings or token lists, ``prompt_embeds``, batch chat's conversations,
            ``documents``, ``texts``, ``queries``, ``items``, ``text_1``/``text_2``, ``data_1``/``data_2``, the
            structured decisions' ``questions``, ...). A token list counts as one prompt, and a conversation's
            messages as one. Default 2048, OpenAI's bound on an embeddings
            ``input`` list: each prompt is an engine request, so 2048 still fill the largest engine batches,
            and a client with more splits them. Checked the same way.
        engine_args: Every other key of the model's mapping, passed unchanged to vLLM's ``AsyncEngineArgs``.
    """

    model: str
    enable_auto_tool_choice: bool | None = None
    tool_call_parser: str | None = None
    chat_template: str | None = None
    reasoning_parser: str | None = None
    quant_config: str | None = None
    response_role: str | None = None
    chat_template_content_format: ChatTemplateContentFormat | None = None
    default_chat_template_kwargs: dict[str, Any] | None = None
    trust_request_chat_template: bool | None = None
    return_tokens_as_token_ids: bool | None = None
    exclude_tools_when_tool_choice_none: bool | None = None
    enable_prompt_tokens_details: bool | None = None
    enable_force_include_usage: bool | None = None
    trust_request_mm_kwargs: bool | None = None
    tool_strict_level: ToolStrictLevel | None = None
    enable_per_request_metrics: bool | None = None
    enable_log_outputs: bool | None = None
    enable_log_deltas: bool | None = None
    anthropic_disabled_thinking_effort: DisabledThinkingEffort | None = None
    served_model_name: str | list[str] | None = None
    pinned: bool = False
    priority: int = 0
    preload: bool = False
    idle_unload_s: PositiveFloat | None = None
    max_concurrent_requests: PositiveInt | None = None
    lora_modules: dict[str, str] | None = None
    max_n: PositiveInt = 128
    max_best_of: PositiveInt = 128
    max_batch_prompts: PositiveInt = 2048
    engine_args: dict[str, Any] = msgspec.field(default_factory=dict)

    @property
    def aliases(self) -> tuple[str, ...]:
        """The ``served_model_name`` values, in order (empty when none)."""
        names = self.served_model_name
        if names is None:
            return ()
        return (names,) if isinstance(names, str) else tuple(names)


class Switching(Base, frozen=True, kw_only=True):
    """How the server moves the device from one model to another.

    Attributes:
        mode: ``manual``: only the admin switch route changes the active model, and a request for another
            configured model gets 409. ``auto``: a request for another configured model switches to it.
        drain_timeout: Seconds a switch waits for in-flight requests before it aborts them.
        strategy: What happens to the model being left: ``stop`` unloads it, ``keep`` leaves it resident,
            ``sleep`` uses vLLM sleep mode, ``reconfigure`` swaps the model inside the running engine processes
            (CPU and CUDA; a pair it cannot swap in place, such as another tensor-parallel size, restarts the
            engine), ``stash`` uses vLLM-Gaudi's in-process reconfigure. ``auto`` picks stash on HPU with
            vllm_gaudi; on CPU and CUDA it keeps models resident while memory allows, otherwise reconfigures.
        sleep_level: vLLM sleep level for ``sleep``: 1 offloads weights to host RAM, 2 discards them.
        max_active: How many engines may be resident at once under ``keep`` (the active one included). Unset:
            no count limit; with ``strategy: auto`` on CPU, host RAM still bounds residency. With a memory
            budget it is an extra cap beside it.
        memory_budget: The memory resident models may take together under ``keep`` (and ``auto`` on CPU and
            CUDA): a size (``70GiB``, ``512MiB``) or a fraction of the device's memory (``0.8``). Default: the
            device's memory less a 10% reserve. A model is loaded when its footprint (weights, KV cache, engine)
            fits beside the resident ones; otherwise idle, unpinned residents are evicted, in the order
            ``eviction`` gives, until it does. A model whose footprint alone exceeds the budget is a profile error.
        eviction: Which idle, unpinned resident goes first when another model needs the room (by count or by
            memory): ``cost`` the one whose loss costs least, weighing its measured cost to come back
            (``GET /admin/costs``), how often it served, its bytes and how long it sat idle (the formula is in
            ``docs/residency.md``); ``lru`` the least recently used. Either way a model with a higher
            ``priority`` value goes before one with a lower value.
        min_residency_s: Auto mode: the shortest time a model keeps the device once it is active, while it has
            requests in flight and others wait. A model with nothing in flight gives the device up at once.
        max_residency_s: Auto mode: the longest such time. In between, the time grows with the measured cost
            of the pending switch (four times it), so a dear switch is made rarely.
        max_wait_s: Auto mode: the longest a request waits for its model. Past it the request gets 503 with
            ``Retry-After``; the active model also gives the device up early so that waiters make it in time.
        max_queue: How many requests may wait for one model (auto mode's switches, manual mode's admin switch, a
            model at its ``max_concurrent_requests``); the next one gets 503 with ``Retry-After`` at once, or 429
            ``too_many_requests`` with ``Retry-After`` while its model serves its ``max_concurrent_requests``.
        failure_backoff_s: Auto mode: after a model fails to load it is not tried again for this long, doubled
            after each further failure. Meanwhile its requests get 503 ``model_load_failed`` at once, and the
            healthy model keeps serving. An admin switch retries at once.
        max_failure_backoff_s: The cap of that doubling backoff.
        idle_unload_s: The default of every model's ``idle_unload_s`` (unset: models stay loaded).
        health_check_interval_s: Seconds between two health checks of each running engine: a round trip to
            its engine core, which a hung engine core (a wedged device, a stopped process) never answers. A
            dead engine process is noticed at once, whatever this says.
        health_check_timeout_s: Seconds a health check may wait for its answer. An engine that does not
            answer in time, no thread of whose processes used CPU time meanwhile and no output of which arrived,
            counts as hung: its processes are killed and it is handled as a dead engine, so a hang is noticed
            within ``health_check_interval_s + health_check_timeout_s`` (one timeout more when it still worked as
            the check began). A late engine that works (a long step) is busy, not hung: the check waits on, one
            timeout at a time.
        load_timeout_s: The longest a model load (an engine start, or an in-place swap of the model) may
            take. On expiry the engine's processes are killed and the load fails; the switch then rolls back
            as any failed switch does.
        max_restarts: Manual mode: how often the active model is restarted after its engine died, at once and
            then after the failure backoff, before it stays ``failed`` until an admin switch or reload (a death
            within a minute of a restart that brought it back counts on: a crash loop stops too). Auto
            mode brings a dead model back when it is next wanted, with the failure backoff.
        kv_keep_bytes: Bytes of host memory (tmpfs) that keep the prefix-cache blocks of models the device
            leaves (``reconfigure`` and ``stop``), so that a model's next prompt that extends a kept prefix is a
            prefix-cache hit instead of a full prefill. One pool for all models, least recently used blocks
            evicted first; blocks are keyed by the model's weights, tokenizer and dtypes, so they never serve
            another model, nor the same one after its weights changed. Unset: nothing is kept. On CPU it is
            reserved out of the memory the engines and the default memory budget take; a keep that would leave
            tmpfs short of free memory is skipped. The pool is a private folder of the server's (mode 0700),
            removed when the server stops.
        verify: Which switches prove the model they publish before it serves: a fixed greedy probe (a few
            tokens through the model's own chat template, tokenizer and engine) compared with what the model
            answered before, as vLLM's own tests compare two runs. ``fast_paths``: every model a fast path
            changed (an in-place swap, an engine forked from the warm launcher, a wake, a stash restore); a
            plain engine start records the model's first answer. ``always``: plain starts are compared too.
            ``off``: nothing is proven. On a mismatch the model is started the plain way (a freshly spawned
            engine, no kept KV blocks) and probed: agreeing with the fast path means the checkpoint changed
            (``changed``); agreeing with the record means the fast path was wrong, and the plain engine serves,
            the model staying on the plain path until a reload or restart (``fell_back``); otherwise the switch
            fails and rolls back (``failed``). Requests wait through the proof. The answers are kept in the
            server's private state folder, keyed on the checkpoint's content, tokenizer, template, dtype,
            quantization, LoRA adapters and vLLM's version, so a restart compares with what ran before.
    """

    mode: SwitchMode = "manual"
    drain_timeout: NonNegativeFloat = 60.0
    strategy: StrategyName = "auto"
    sleep_level: SleepLevel = 1
    max_active: PositiveInt | None = None
    memory_budget: MemorySize | DeviceFraction | None = None
    eviction: EvictionRule = "cost"
    min_residency_s: NonNegativeFloat = 2.0
    max_residency_s: NonNegativeFloat = 60.0
    max_wait_s: PositiveFloat = 120.0
    max_queue: PositiveInt = 256
    failure_backoff_s: NonNegativeFloat = 5.0
    max_failure_backoff_s: NonNegativeFloat = 300.0
    idle_unload_s: PositiveFloat | None = None
    health_check_interval_s: PositiveFloat = 10.0
    health_check_timeout_s: PositiveFloat = 10.0
    load_timeout_s: PositiveFloat = 600.0
    max_restarts: Annotated[int, Meta(ge=0)] = 3
    kv_keep_bytes: PositiveInt | None = None
    verify: VerifyMode = "fast_paths"

    @property
    def auto(self) -> bool:
        """Whether the scheduler decides the switches (``mode: auto``), not the admin: the one check of the mode."""
        return self.mode == "auto"

    @property
    def proves(self) -> bool:
        """Whether switches prove the models they publish (``verify`` is not ``off``): the one check of it."""
        return self.verify != "off"

    @property
    def proves_plain_starts(self) -> bool:
        """Whether a plain engine start is compared with the record too (``verify: always``)."""
        return self.verify == "always"


class ApiKeyScope(Base, frozen=True, kw_only=True):
    """An API key limited to some models (one item of ``server.api_keys``).

    Attributes:
        key_env: Name of the env var that holds the key (the secret itself never goes in the file); the server
            refuses to start while it is unset.
        models: The models the key may use, by name or ``served_model_name`` alias (an alias counts as its
            model, with all of its names). Other models are hidden from it: ``/v1/models`` leaves them out, and a
            request naming one gets the same 404 ``model_not_found`` as a name no model has.
        cache_group: The prefix-cache group of the key. Each key has a cache of its own by default: its requests
            reuse only the cached prompt prefixes (and the KV blocks a ``keep`` switch kept) of its own earlier
            requests, so no key can learn what another sent through ``usage.prompt_tokens_details.cached_tokens``
            or the time to the first token. Keys that name the same group share one cache (a team with several
            keys). The group is salted with a secret the server draws at start, never with the name alone, and a
            request's own ``cache_salt`` is combined with its group's (it narrows the sharing, never widens it).
    """

    key_env: str
    models: list[str]
    cache_group: str | None = None


class ServerSection(Base, frozen=True, kw_only=True):
    """Server settings that belong with the models.

    Attributes:
        admin_token_env: Name of the env var that holds the admin bearer token.
        api_key_env: Name of the env var that holds the API key guarding ``/v1/*`` (unset: vLLM's
            ``VLLM_API_KEY``, else no key). That key may use every model.
        api_keys: Keys limited to some models, each ``{key_env, models}``. Any of them (or the ``api_key_env``
            key) is accepted as ``Authorization: Bearer <key>`` or ``x-api-key``; once one is configured, the
            serving routes need a key. A reload applies changes to the keys (and to their variables' values) at
            once.
        metrics_token_env: Name of the env var that holds a bearer token ``/metrics`` then needs (the admin
            token is accepted too). Unset: open on a server without keys, as vLLM's; on a server with keys
            (``api_key_env``'s or ``api_keys``) only the admin token opens it, unless ``metrics_public``.
        allowed_hosts: The ``Host`` names the server answers, each a name, ``*.domain`` (its subdomains) or
            ``*`` (any); others get 403 (a defence against DNS rebinding). Default: ``localhost`` and loopback
            addresses when bound to loopback; under ``turnout serve`` bound to another address, this machine's
            names and addresses (host name, fully qualified name, its interfaces' addresses, the bind address),
            with a warning at start: list the other names clients use (a DNS alias, a proxy's). Any ``Host``
            under ``turnout ray-serve`` off loopback.
        reload_dirs: Folders ``POST /admin/reload`` may read a profile from (relative ones from the profile's
            folder); default: the served profile's folder. Any other path is refused without being opened.
        stream_stall_timeout_s: Seconds a stream may wait for its client to take a chunk (a client that stopped
            reading, its socket buffers full) before it is ended: its engine request is aborted, its lease
            released, and the end logged with the model and request id, so that neither switches nor
            ``max_concurrent_requests`` wait on it. Waiting for the engine does not count. nginx's
            ``send_timeout`` is 60 s too.
        api_key_cache_group: The prefix-cache group of the ``api_key_env`` (or ``--api-key``) key, as an
            ``api_keys`` item's ``cache_group``; unset: a cache of its own. Without any key, every request shares
            one cache, as in vLLM.
        header_timeout_s: Seconds a client has to send a request's line and headers, counted from when its
            connection opens and from the first byte of each next request on it; past it the connection is
            closed, so a client that trickles a request (a slow-loris) holds no connection longer. Bodies and
            answers are not timed by it. Default 30: a client sends its headers at once, and a half-sent request
            is closed within a minute (nginx's ``client_header_timeout`` is 60 s). Applies at a restart.
        body_timeout_s: Seconds that may pass between two reads of a request's body while it is incomplete (as
            nginx's ``client_body_timeout``); past it the client is answered 408 (when nothing was answered yet)
            and the connection closed, so a client that trickles a body holds no connection longer. A large body
            sent steadily (an audio upload) takes as long as it needs; time the server itself waits to read does
            not count. While a body is incomplete its connection also counts as not served at the connection cap
            (``max_connections``). Default 30: a client sends a body as fast as its link allows, and nginx's 60 s
            is the most a slow link should need between two packets. Applies at a restart.
        keep_alive_timeout_s: Seconds an idle keep-alive connection stays open between two requests (uvicorn's
            ``timeout_keep_alive``; ``turnout serve --timeout-keep-alive`` overrides it). Default 65, not
            uvicorn's and vLLM's 5: above the 5 s after which httpx (so the OpenAI SDK) expires an idle
            connection and the 60 s of common proxies, so the server's close never races a client's next request
            on a connection the client still trusts (that request would get a reset). Applies at a restart.
        max_connections: Most client connections open at once. Past it a new connection closes one that serves
            nothing (the oldest that never completed a request's headers, else the one whose request body came
            slowest so far, else the one idle longest between two requests); it gets a 503 with
            ``Retry-After`` only when every connection has a complete request in flight. So half-sent requests
            never starve ``/health`` or clients with requests in flight. Default 1024: far
            more than one device serves at once (``switching.max_queue`` waits per model, engine batches of a
            few hundred). Keep it below the process's open-file limit (``ulimit -n``) less what the engines use;
            the server warns at start when it is not. Applies at a restart.
        metrics_public: Serve ``/metrics`` without a token on a server with keys (its labels name every model,
            the ones hidden from a key included); a ``metrics_token_env`` token, when set, is still needed.
    """

    admin_token_env: str = DEFAULT_ADMIN_TOKEN_ENV
    api_key_env: str = DEFAULT_API_KEY_ENV
    api_keys: list[ApiKeyScope] = msgspec.field(default_factory=list)
    metrics_token_env: str | None = None
    allowed_hosts: list[str] | None = None
    reload_dirs: list[str] | None = None
    stream_stall_timeout_s: PositiveFloat = 60.0
    api_key_cache_group: str | None = None
    header_timeout_s: PositiveFloat = 30.0
    body_timeout_s: PositiveFloat = 30.0
    keep_alive_timeout_s: PositiveInt = 65
    max_connections: PositiveInt = 1024
    metrics_public: bool = False


class Profile(Base, frozen=True, kw_only=True):
    """A validated, resolved profile.

    Attributes:
        path: The file it came from (absolute).
        default_model: The model loaded at start-up: ``default_model``, else ``$MODEL``, else the first model.
        models: Model name to its profile, in file order.
        switching: Switching settings.
        server: Server settings.
    """

    path: str
    default_model: str
    models: dict[str, ModelProfile]
    switching: Switching = msgspec.field(default_factory=Switching)
    server: ServerSection = msgspec.field(default_factory=ServerSection)
