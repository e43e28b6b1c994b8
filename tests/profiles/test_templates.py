"""Chat template checks, and the tool-use templates we ship."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.profiles.template_checks import SAMPLE_TOOLS, check_chat_template, sandbox

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
SHIPPED = ["qwen3-hermes-tools.jinja", "llama31-json-tools.jinja"]


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_tool_templates_pass(name: str) -> None:
    assert check_chat_template(TEMPLATES / name, name, uses_tools=True) == []


def test_qwen3_template_renders_hermes_tool_calls() -> None:
    template = sandbox().from_string((TEMPLATES / "qwen3-hermes-tools.jinja").read_text())
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
        },
        {"role": "tool", "content": "18 C"},
    ]

    text = template.render(messages=messages, tools=SAMPLE_TOOLS, add_generation_prompt=True)

    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in text
    assert "<|im_start|>user\n<tool_response>\n18 C\n</tool_response><|im_end|>" in text
    assert '<tools>\n{"type": "function", "function": {"name": "get_weather"' in text
    assert text.endswith("<|im_start|>assistant\n")


def test_qwen3_template_can_turn_thinking_off() -> None:
    template = sandbox().from_string((TEMPLATES / "qwen3-hermes-tools.jinja").read_text())

    text = template.render(
        messages=[{"role": "user", "content": "hi"}], add_generation_prompt=True, enable_thinking=False
    )

    assert text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_llama31_template_renders_json_tool_calls() -> None:
    template = sandbox().from_string((TEMPLATES / "llama31-json-tools.jinja").read_text())
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "f", "arguments": '{"a": 1}'}}],
        },
        {"role": "tool", "content": "18 C"},
    ]

    text = template.render(messages=messages, tools=SAMPLE_TOOLS, add_generation_prompt=True, bos_token="<B>")

    assert text.startswith("<B><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\n")
    assert '{"name": "f", "parameters": {"a": 1}}<|eot_id|>' in text
    assert "<|start_header_id|>ipython<|end_header_id|>\n\n18 C<|eot_id|>" in text
    assert text.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")


def test_generation_tag_and_loop_controls_compile(tmp_path: Path) -> None:
    # transformers' environment has both; templates that use them must not be reported as broken.
    path = tmp_path / "t.jinja"
    path.write_text(
        "{% for m in messages %}{% if m.role == 'system' %}{% continue %}{% endif %}"
        "{% generation %}{{ m.content }}{% endgeneration %}{% endfor %}"
    )

    assert check_chat_template(path, "t.jinja", uses_tools=False) == []


def test_sandbox_blocks_unsafe_attribute_access(tmp_path: Path) -> None:
    path = tmp_path / "evil.jinja"
    path.write_text("{{ messages.__class__.__mro__ }}{% for m in messages %}{{ m.content }}{% endfor %}")

    findings = check_chat_template(path, "evil.jinja", uses_tools=False)

    assert findings[0][0] == "error"
    assert "SecurityError" in findings[0][1] or "UndefinedError" in findings[0][1]


def test_template_dropping_the_user_message_warns(tmp_path: Path) -> None:
    path = tmp_path / "t.jinja"
    path.write_text("{{ messages | length }}")

    findings = check_chat_template(path, "t.jinja", uses_tools=True)

    assert findings == [
        (
            "warning",
            "chat_template 't.jinja' drops the user's last message from a sample conversation without tools",
        ),
        (
            "warning",
            "chat_template 't.jinja' drops the user's last message from a sample conversation with tools",
        ),
    ]


def test_template_that_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "t.jinja"
    path.write_bytes(b"\xff\xfe{{ x }}")

    [(severity, message)] = check_chat_template(path, "t.jinja", uses_tools=False)

    assert severity == "error"
    assert message.startswith("chat_template 't.jinja' cannot be read as UTF-8 text:")
