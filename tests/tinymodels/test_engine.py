"""tiny-tools end to end: a real vLLM engine with the demo profile's engine args, and vLLM's hermes parser."""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from server.profiles import load_profile
from server.tinymodels import TINY_TOOLS, TOOL_CALL_ANSWER, WEATHER_TOOL
from server.tinymodels.spec import REPO_ROOT

pytestmark = pytest.mark.engine

DEMO = REPO_ROOT / "profiles" / "demo.yaml"
USER = [{"role": "user", "content": "What's the weather in Paris?"}]


@pytest.fixture(scope="module")
async def engine(tiny_models: dict[str, Path]) -> AsyncIterator[Any]:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    # The demo profile's engine args, so this test also proves they start an engine.
    engine_args = load_profile(DEMO).models["tools"].engine_args
    llm = AsyncLLM.from_engine_args(AsyncEngineArgs(model=str(tiny_models[TINY_TOOLS.name]), **engine_args))
    yield llm
    llm.shutdown()
    # Let the cancelled output task finish so it drops its reference to the engine: otherwise the engine lives
    # until interpreter exit, where its __del__ calls shutdown() again on torn-down modules and prints a
    # TypeError traceback.
    await asyncio.sleep(0.1)
    del llm
    gc.collect()


async def _generate(engine: Any, tools: list[dict[str, Any]] | None) -> list[Any]:
    """Greedy outputs, one per engine step (cumulative text and token ids)."""
    from vllm import SamplingParams

    tokenizer = engine.get_tokenizer()
    prompt = tokenizer.apply_chat_template(USER, tools=tools, tokenize=False, add_generation_prompt=True)
    ids = tokenizer.encode(prompt, add_special_tokens=False)
    params = SamplingParams(temperature=0.0, max_tokens=64)
    return [out async for out in engine.generate({"prompt_token_ids": ids}, params, request_id=f"t-{bool(tools)}")]


def _request(tools: list[dict[str, Any]]) -> Any:
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    return ChatCompletionRequest.model_validate({"model": "tools", "messages": USER, "tools": tools})


def _parser(engine: Any) -> Any:
    from vllm.tool_parsers.hermes_tool_parser import Hermes2ProToolParser

    return Hermes2ProToolParser(engine.get_tokenizer())


async def test_greedy_tool_call_parsed_by_hermes(engine: Any) -> None:
    final = (await _generate(engine, [WEATHER_TOOL]))[-1].outputs[0]

    assert final.text == TOOL_CALL_ANSWER
    assert final.finish_reason == "stop"
    info = _parser(engine).extract_tool_calls(final.text, _request([WEATHER_TOOL]))
    assert info.tools_called
    assert [(c.function.name, json.loads(c.function.arguments)) for c in info.tool_calls] == [
        ("get_weather", {"city": "Paris"})
    ]
    assert info.content is None


async def test_streamed_tool_call_parsed_by_hermes(engine: Any) -> None:
    outputs = [out.outputs[0] for out in await _generate(engine, [WEATHER_TOOL])]
    parser, request = _parser(engine), _request([WEATHER_TOOL])
    names: list[str] = []
    arguments, previous_text, previous_ids = "", "", list[int]()
    for out in outputs:
        delta_ids = out.token_ids[len(previous_ids) :]
        message = parser.extract_tool_calls_streaming(
            previous_text,
            out.text,
            out.text[len(previous_text) :],
            previous_ids,
            out.token_ids,
            delta_ids,
            request,
        )
        for call in message.tool_calls if message else []:
            names += [call.function.name] if call.function.name else []
            arguments += call.function.arguments or ""
        previous_text, previous_ids = out.text, list(out.token_ids)

    assert len(outputs) > 5  # it really streamed token by token
    assert names == ["get_weather"]
    assert json.loads(arguments) == {"city": "Paris"}


async def test_plain_answer_without_tools(engine: Any) -> None:
    final = (await _generate(engine, None))[-1].outputs[0]

    assert final.text == TINY_TOOLS.plain_answer
    assert final.finish_reason == "stop"
