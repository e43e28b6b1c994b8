"""vLLM's serving objects for one model (`VllmFrontend`), and the engine's renderer the in-place swap rebuilds.

It builds vLLM's own serving objects for one model, the way `vllm serve` does in `init_app_state`, but from
our frozen `FrontendSettings` instead of an `argparse.Namespace`, and drives them with plain dict bodies so
that nothing above this package sees FastAPI, Starlette or pydantic. Results come back as `JsonResult` or
`StreamResult`. Written against vLLM 0.32.0, like the whole package (whose ``__init__`` checks the version).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vllm.engine.protocol import EngineClient
from vllm.entrypoints.mcp.tool_server import ToolServer
from vllm.entrypoints.openai.chat_completion.serving import OpenAIServingChat
from vllm.entrypoints.openai.completion.serving import OpenAIServingCompletion
from vllm.entrypoints.openai.models.protocol import BaseModelPath, LoRAModulePath
from vllm.entrypoints.openai.models.serving import OpenAIServingModels
from vllm.entrypoints.pooling.embed.serving import ServingEmbedding
from vllm.entrypoints.serve.utils.request_logger import RequestLogger
from vllm.exceptions import VLLMValidationError
from vllm.parser.metrics import init_parser_metrics
from vllm.renderers import renderer_from_config
from vllm.renderers.online_renderer import OnlineRenderer
from vllm.tasks import SupportedTask
from vllm.utils.counter import AtomicCounter

from server.frontend.settings import FrontendConfigError, FrontendSettings
from server.frontend.vllm_adapter._moved import moved, supported_kwargs
from server.frontend.vllm_adapter._operations import ServingContext, ServingOperations, chat_template_config
from server.frontend.vllm_adapter._parsers import parser_registry
from server.frontend.vllm_adapter._tool_server import open_tool_server

__all__ = ["VllmFrontend", "build_renderer"]

#: The LoRA ids of every bundle in this process. vLLM numbers adapters per `OpenAIServingModels` from 1, and an
#: engine's worker takes an id it already holds for the same adapter: a bundle rebuilt over a running engine (a
#: reload) would get the old bundle's adapter weights under its own adapter names.
_LORA_IDS = AtomicCounter(0)


def build_renderer(vllm_config: Any) -> Any:
    """``AsyncLLM``'s renderer for ``vllm_config``, built as ``AsyncLLM.__init__`` builds it.

    The engine layer's in-place swap (``server/vllm_plugin/``) rebuilds the renderer after its engine
    core loaded another model; the CLI hands it this function, so vLLM's renderers stay imported here only.
    """
    return renderer_from_config(vllm_config)


class VllmFrontend:
    """vLLM's serving objects for one model, driven with dict bodies.

    `engine` is what the generating serving classes submit requests to (the bundle passes a recording stand-in
    for the real engine), `model_engine` is the real engine, used where nothing is submitted.
    """

    def __init__(
        self,
        *,
        model_name: str,
        engine: EngineClient,
        model_engine: EngineClient,
        settings: FrontendSettings,
        supported_tasks: tuple[SupportedTask, ...],
        tool_server: ToolServer | None = None,
    ) -> None:
        self.model_name = model_name
        self._model_config = model_engine.model_config
        self.max_model_len: int = self._model_config.max_model_len
        pooling_task = self._model_config.get_pooling_task(supported_tasks)
        self.supports_embeddings: bool = pooling_task == "embed"

        chat_template = _load_template(settings.chat_template)
        content_format = settings.chat_template_content_format
        logger = RequestLogger(max_log_len=settings.max_log_len) if settings.log_requests else None
        # The model's LoRA adapters are vLLM's static LoRA modules, as `vllm serve --lora-modules` makes them;
        # `open` loads them into the engine before the first request.
        lora_modules = [
            LoRAModulePath(name=name, path=path, base_model_name=model_name)
            for name, path in settings.lora_modules.items()
        ]
        models = OpenAIServingModels(
            engine_client=model_engine,
            base_model_paths=[BaseModelPath(name=model_name, model_path=self._model_config.model)],
            lora_modules=lora_modules or None,
        )
        models.lora_id_counter = _LORA_IDS
        self._models = models
        renderer_settings: dict[str, Any] = {
            "request_logger": logger,
            "chat_template": chat_template,
            "chat_template_content_format": content_format,
            "enable_auto_tools": settings.enable_auto_tool_choice,
            "tool_parser": settings.tool_call_parser,
            "reasoning_parser": settings.reasoning_parser,
            "trust_request_chat_template": settings.trust_request_chat_template,
            "trust_request_mm_kwargs": settings.trust_request_mm_kwargs,
            "exclude_tools_when_tool_choice_none": settings.exclude_tools_when_tool_choice_none,
            "tool_strict_level": settings.tool_strict_level,
            "default_chat_template_kwargs": dict(settings.default_chat_template_kwargs),
        }
        self._renderer = OnlineRenderer(
            model_config=self._model_config,
            renderer=model_engine.renderer,
            **supported_kwargs(OnlineRenderer, renderer_settings),
        )
        self._renderer.warmup()
        # What chat, completions, Responses and Messages share of the settings (as vLLM's init_generate_state).
        usage: dict[str, Any] = {
            "return_tokens_as_token_ids": settings.return_tokens_as_token_ids,
            "enable_prompt_tokens_details": settings.enable_prompt_tokens_details,
            "enable_force_include_usage": settings.enable_force_include_usage,
        }
        chat: OpenAIServingChat | None = None
        completion: OpenAIServingCompletion | None = None
        if "generate" in supported_tasks:
            chat_settings: dict[str, Any] = dict(
                online_renderer=self._renderer,
                request_logger=logger,
                chat_template=chat_template,
                chat_template_content_format=content_format,
                enable_auto_tools=settings.enable_auto_tool_choice,
                tool_parser=settings.tool_call_parser,
                reasoning_parser=settings.reasoning_parser or "",
                trust_request_chat_template=settings.trust_request_chat_template,
                exclude_tools_when_tool_choice_none=settings.exclude_tools_when_tool_choice_none,
                default_chat_template_kwargs=dict(settings.default_chat_template_kwargs),
                tool_strict_level=settings.tool_strict_level,
                enable_per_request_metrics=settings.enable_per_request_metrics,
                enable_log_outputs=settings.enable_log_outputs,
                enable_log_deltas=settings.enable_log_deltas,
                **usage,
            )
            chat = OpenAIServingChat(
                engine, models, settings.response_role, **supported_kwargs(OpenAIServingChat, chat_settings)
            )
            completion = OpenAIServingCompletion(
                engine,
                models,
                online_renderer=self._renderer,
                request_logger=logger,
                enable_per_request_metrics=settings.enable_per_request_metrics,
                **usage,
            )
        embedding: ServingEmbedding | None = None
        if self.supports_embeddings:
            template_config = chat_template_config(chat_template, settings)
            # Its __init__ takes *args, **kwargs (passed on to PoolingBaseServing), hence untyped.
            embedding = ServingEmbedding(  # type: ignore[no-untyped-call]
                engine, models, request_logger=logger, chat_template_config=template_config
            )
        self.operations = ServingOperations(
            ServingContext(
                model_name=model_name,
                engine=engine,
                models=models,
                renderer=self._renderer,
                logger=logger,
                chat_template=chat_template,
                settings=settings,
                supported_tasks=supported_tasks,
                tool_server=tool_server,
            )
        )
        self.operations.attach(chat=chat, completion=completion, embedding=embedding)

    @classmethod
    async def open(
        cls, model_name: str, *, engine: EngineClient, model_engine: EngineClient, settings: FrontendSettings
    ) -> VllmFrontend:
        """Check `settings` against this vLLM and build the serving objects.

        Raises:
            FrontendConfigError: An unknown parser or an unreadable chat template. (Auto tool choice without a
                tool parser is refused by profile validation, before any bundle is built.)
        """
        _check_parsers(settings)
        if settings.tool_call_parser is not None:
            # vllm serve does the same; the counter's model label is process-wide, like our one active model.
            init_parser_metrics(model_name=model_name)
        tasks = await model_engine.get_supported_tasks()
        # As vllm serve: only a generate model's Responses API has tools.
        tool_server = await open_tool_server(settings.tool_server) if "generate" in tasks else None
        try:
            frontend = cls(
                model_name=model_name,
                engine=engine,
                model_engine=model_engine,
                settings=settings,
                supported_tasks=tasks,
                tool_server=tool_server,
            )
        except TypeError as exc:
            # ParserManager reports a parser that cannot work with this tokenizer as a TypeError.
            raise FrontendConfigError(f"model {model_name!r}: {exc}") from exc
        await frontend._load_adapters()
        return frontend

    @property
    def adapters(self) -> tuple[str, ...]:
        """The names of the LoRA adapters loaded into this model's engine."""
        return tuple(self._models.lora_requests)

    async def _load_adapters(self) -> None:
        """Load the model's LoRA adapters into its engine (vLLM's `init_static_loras`, as `vllm serve` does)."""
        if self._models.static_lora_modules is None:
            return
        try:
            await self._models.init_static_loras()  # type: ignore[no-untyped-call]
        except Exception as exc:  # vLLM raises ValueError with its error body's message, or the engine's error
            raise FrontendConfigError(f"model {self.model_name!r}: a LoRA adapter cannot be loaded: {exc}") from exc


def _check_parsers(settings: FrontendSettings) -> None:
    registry = parser_registry()
    tool_parsers = registry.tool_parsers()
    if settings.tool_call_parser is not None and settings.tool_call_parser not in tool_parsers:
        raise FrontendConfigError(
            f"unknown tool_call_parser {settings.tool_call_parser!r}; vLLM has: {', '.join(sorted(tool_parsers))}"
        )
    reasoning_parsers = registry.reasoning_parsers()
    if settings.reasoning_parser is not None and settings.reasoning_parser not in reasoning_parsers:
        raise FrontendConfigError(
            f"unknown reasoning_parser {settings.reasoning_parser!r}; vLLM has: {', '.join(sorted(reasoning_parsers))}"
        )


def _load_template(path: str | None) -> str | None:
    if path is None:
        return None
    file = Path(path)
    if file.is_file():
        # Read it ourselves: vLLM's load_chat_template caches by path for the life of the process, so a
        # template edited between two builds of the same model would never be seen again.
        return file.read_text(encoding="utf-8")
    try:
        # Not a file: one of the templates vLLM ships, named as `vllm serve --chat-template` accepts it.
        return moved("load_chat_template")(path)  # type: ignore[no-any-return]
    except (OSError, ValueError, VLLMValidationError) as exc:
        raise FrontendConfigError(f"chat_template {path!r} cannot be read: {exc}") from exc
