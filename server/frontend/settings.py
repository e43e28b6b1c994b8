"""The frozen, typed options one model's frontend bundle is built from.

Nothing here imports vLLM: the engine manager builds these from a profile, and `turnout validate` may look at
them without paying for vLLM's import.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from server.profiles import ChatTemplateContentFormat, DisabledThinkingEffort, ToolStrictLevel

__all__ = ["FrontendConfigError", "FrontendSettings"]


class FrontendConfigError(ValueError):
    """The settings cannot be served by this vLLM: an unknown parser, a missing chat template, and so on."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FrontendSettings:
    """How one model's OpenAI frontend renders prompts and parses output.

    Attributes:
        enable_auto_tool_choice: Accept `tool_choice: "auto"` and parse tool calls out of the model's text.
            Needs `tool_call_parser`. Without it, vLLM answers `tool_choice: "auto"` with a 400.
        tool_call_parser: Name of a tool parser registered in vLLM (`hermes`, `llama3_json`, ...). vLLM only
            uses it when `enable_auto_tool_choice` is on.
        chat_template: Path of a Jinja chat template file, or None for the tokenizer's own template. vLLM's
            bundled template names (as `vllm serve --chat-template` accepts them) work too.
        reasoning_parser: Name of a reasoning parser registered in vLLM, or None. The engine should get the
            same name (`AsyncEngineArgs.reasoning_parser`) so structured output knows where reasoning ends.
        response_role: Role of the generated message when the request asks for a generation prompt.
        chat_template_content_format: How message content reaches the template; "auto" lets vLLM detect it.
        log_requests: Log each request's prompt and sampling parameters through vLLM's request logger.
        max_log_len: Longest prompt (in characters and token ids) the request logger prints; None: no limit.
        default_chat_template_kwargs: Keyword arguments every render of the chat template gets (a request's own
            ``chat_template_kwargs`` win), e.g. ``{"enable_thinking": false}``.
        trust_request_chat_template: Accept a request's own ``chat_template`` (off: vLLM refuses it with a 400).
        return_tokens_as_token_ids: Logprobs name tokens as ``token_id:N`` rather than as text.
        exclude_tools_when_tool_choice_none: Leave the tools out of the prompt when ``tool_choice`` is ``none``.
        enable_prompt_tokens_details: Report ``prompt_tokens_details`` (cached tokens) in usage.
        enable_force_include_usage: Include usage in every response, streamed ones too.
        lora_modules: LoRA adapter name to its folder (the profile's ``lora_modules``): vLLM's static LoRA
            modules of this model, loaded into its engine when the bundle is built.
        trust_request_mm_kwargs: Accept a request's ``mm_processor_kwargs`` and ``media_io_kwargs`` (off: vLLM
            refuses non-empty ones, since they change how much multimodal preprocessing a request costs).
        tool_strict_level: The floor of structural-tag tool calling: ``auto`` follows each request,
            ``function`` constrains every tool call's envelope, ``parameter`` also pins argument schemas.
        enable_per_request_metrics: Include per-request timing metrics in chat, completion and Responses answers.
        enable_log_outputs: Log generated outputs through the request logger (needs ``log_requests``).
        enable_log_deltas: With ``enable_log_outputs``, also log each streamed delta.
        anthropic_disabled_thinking_effort: The ``reasoning_effort`` a Messages request with
            ``thinking: {type: disabled}`` renders with (``auto``: vLLM picks ``none`` or ``low``).
        enable_flash_late_interaction: Score late-interaction (ColBERT-style) models with vLLM's fused MaxSim.
        tool_server: The Responses API's tool server: MCP servers as ``host:port`` pairs (comma-separated) or
            ``demo`` (vLLM's browser and Python tools), as vLLM's ``--tool-server``; None: no built-in tools.
    """

    enable_auto_tool_choice: bool = False
    tool_call_parser: str | None = None
    chat_template: str | None = None
    reasoning_parser: str | None = None
    response_role: str = "assistant"
    chat_template_content_format: ChatTemplateContentFormat = "auto"
    log_requests: bool = False
    max_log_len: int | None = None
    default_chat_template_kwargs: dict[str, Any] = field(default_factory=dict, hash=False)
    trust_request_chat_template: bool = False
    return_tokens_as_token_ids: bool = False
    exclude_tools_when_tool_choice_none: bool = False
    enable_prompt_tokens_details: bool = False
    enable_force_include_usage: bool = False
    lora_modules: dict[str, str] = field(default_factory=dict, hash=False)
    trust_request_mm_kwargs: bool = False
    tool_strict_level: ToolStrictLevel = "auto"
    enable_per_request_metrics: bool = False
    enable_log_outputs: bool = False
    enable_log_deltas: bool = True
    anthropic_disabled_thinking_effort: DisabledThinkingEffort = "auto"
    enable_flash_late_interaction: bool = True
    tool_server: str | None = None
