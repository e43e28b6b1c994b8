"""Checking a chat template: it exists, compiles in jinja2's sandbox, and renders a sample conversation.

The environment mirrors the one transformers builds for ``apply_chat_template`` (sandboxed, trim and
lstrip blocks, loop controls, ``{% generation %}``, ``raise_exception``, ``strftime_now``, a non-escaping
``tojson``), so a template that passes here compiles the same way when vLLM renders it.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from types import TracebackType
from typing import Any, Final, NoReturn

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.parser import Parser
from jinja2.sandbox import ImmutableSandboxedEnvironment

from server.profiles.check_context import Finding

__all__ = ["SAMPLE_TOOLS", "check_chat_template", "sandbox"]

SAMPLE_TOOLS: Final[list[dict[str, Any]]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "description": "The city, e.g. Paris"}},
                "required": ["city"],
            },
        },
    }
]
_LAST_USER: Final = "And what should I wear?"
_PLAIN_CHAT: Final[list[dict[str, Any]]] = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Hello!"},
    {"role": "assistant", "content": "Hi! How can I help?"},
    {"role": "user", "content": _LAST_USER},
]
_TOOL_CHAT: Final[list[dict[str, Any]]] = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is the weather in Paris?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": '{"temperature_c": 18}'},
    {"role": "assistant", "content": "It is 18 °C in Paris."},
    {"role": "user", "content": _LAST_USER},
]
_SPECIAL_TOKENS: Final = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>"}


class _GenerationTag(Extension):
    """``{% generation %}...{% endgeneration %}``: transformers marks assistant turns with it."""

    tags = {"generation"}  # noqa: RUF012 (jinja2's Extension API declares it as a class attribute)

    def parse(self, parser: Parser) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller: Any) -> str:
        return str(caller())


def _raise_exception(message: str) -> NoReturn:
    raise jinja2.TemplateError(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: Any = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.datetime.now().strftime(fmt)


def sandbox() -> ImmutableSandboxedEnvironment:
    """A jinja2 sandbox set up like transformers' chat-template environment."""
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationTag, "jinja2.ext.loopcontrols"]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


def check_chat_template(path: Path, shown: str, *, uses_tools: bool) -> list[Finding]:
    """Check one chat template file.

    Args:
        path: The resolved template file.
        shown: The path as the profile wrote it (for messages).
        uses_tools: Whether the model is set up for tool calls. A template that cannot render tools is an
            error for such a model and only a warning for others.

    Returns:
        Every problem found; empty when the template renders both sample conversations.
    """
    what = f"chat_template {shown!r}"
    if not path.exists():
        if "{{" in shown or "{%" in shown:
            return [
                (
                    "error",
                    "chat_template must be a file path; inline templates are not supported "
                    "(put the template in a .jinja file next to the profile)",
                )
            ]
        return [("error", f"{what} not found: there is no file at {path}")]
    if not path.is_file():  # a folder, a FIFO or a device: reading it could block forever
        return [("error", f"{what} is not a regular file ({path})")]
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return [("error", f"{what} cannot be read as UTF-8 text: {exc}")]
    try:
        template = sandbox().from_string(source)
    except jinja2.TemplateSyntaxError as exc:
        return [
            (
                "error",
                f"{what} does not compile in jinja2's sandbox: {exc.message} (template line {exc.lineno})",
            )
        ]
    except Exception as exc:  # jinja2 compiles user text: any failure is a compile error
        return [("error", f"{what} does not compile in jinja2's sandbox: {type(exc).__name__}: {exc}")]
    findings: list[Finding] = []
    for label, messages, tools in (
        ("without tools", _PLAIN_CHAT, None),
        ("with tools", _TOOL_CHAT, SAMPLE_TOOLS),
    ):
        severity: Any = "error" if tools is None or uses_tools else "warning"
        try:
            text = template.render(messages=messages, tools=tools, add_generation_prompt=True, **_SPECIAL_TOKENS)
        except Exception as exc:  # rendering runs user code: every failure is reported, none escapes
            findings.append((severity, f"{what} fails to render a sample conversation {label}: {_explain(exc)}"))
            break  # the same failure with tools too would only repeat it
        if _LAST_USER not in text:
            findings.append(("warning", f"{what} drops the user's last message from a sample conversation {label}"))
    return findings


def _explain(exc: Exception) -> str:
    raised_by_template = type(exc) is jinja2.TemplateError  # raise_exception(...) in the template
    text = f"the template raised: {exc}" if raised_by_template else f"{type(exc).__name__}: {exc}"
    line = _template_line(exc.__traceback__)
    return f"{text} (template line {line})" if line else text


def _template_line(tb: TracebackType | None) -> int | None:
    # jinja2 rewrites tracebacks so that template frames carry the template's own line numbers.
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            line = tb.tb_lineno
        tb = tb.tb_next
    return line
