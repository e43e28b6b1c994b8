#!/usr/bin/env bash
# One-shot, idempotent set-up: .venv/ in the repo root with Turnout, the CPU build of vLLM, Ray Serve and the test
# tools.
# Usage: bash scripts/setup.sh            (a second run only re-checks, it downloads nothing new)
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3

if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
# pip, not uv/poetry: only pip reads this machine's local torch wheel folder.
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[cpu,test,ray]'
# PyPI's torchvision/torchaudio/torchcodec builds break `import transformers` beside the CPU torch; text models
# do not need them.
.venv/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
.venv/bin/python -c "import server, vllm, litestar, ray.serve; print('turnout set-up OK: vllm', vllm.__version__, 'ray', ray.__version__)"
