"""Mixed traffic for two models while switches run, per strategy: no request is lost or answered by the wrong model.

Each run sends chat and completions, streaming and not, for both demo models (a fifth long enough to be cut by
a short drain), while an admin switches back and forth; in auto mode the traffic itself switches too. Every
request must end completed or refused with a retryable error.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from server.tinymodels.spec import TEMPLATES_DIR
from tests.api.live_server import LiveServer
from tests.reliability.conftest import ADMIN_TOKEN, PROFILES, TEMPLATES, Scale, save_summary, write_profile
from tests.reliability.traffic import TrafficReport, mixed_requests, run_traffic

pytestmark = pytest.mark.engine

#: Template reloads during the auto-mode run, and the seconds between them (spread over the traffic).
RELOADS = 4
RELOAD_GAP_S = 0.5


def _targets(count: int, first: str) -> list[str]:
    other = {"tools": "plain", "plain": "tools"}
    targets = [other[first]]
    while len(targets) < count:
        targets.append(other[targets[-1]])
    return targets


def _active(server: LiveServer) -> str:
    status = httpx.get(f"{server.url}/admin/status", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=30)
    active: str = status.json()["active_model"]
    return active


@pytest.mark.parametrize(
    "profile",
    [
        pytest.param("keep", marks=pytest.mark.live_server("keep")),
        pytest.param("stop", marks=pytest.mark.live_server("stop")),
        pytest.param("reconfigure", marks=pytest.mark.live_server("reconfigure")),
        pytest.param("auto", marks=pytest.mark.live_server("auto")),
    ],
)
async def test_mixed_traffic_while_switching(
    profile: str, live: LiveServer, scale: Scale, completion_prompts: dict[str, str], tmp_path: Path
) -> None:
    # The stop strategy starts an engine on every switch: fewer switches keep the short run within minutes.
    switches = scale.admin_switches if profile != "stop" or scale.name == "long" else 2
    specs = mixed_requests(scale.requests, ["tools", "plain"], seed=len(profile))
    # The server is shared: only this test's part of its log counts (the broken-model test makes vLLM's worker log
    # its own load traceback there).
    log_start = len(live.log())
    report = await run_traffic(
        live.url,
        specs,
        prompts=completion_prompts,
        switch_targets=_targets(switches, _active(live)),
        admin_token=ADMIN_TOKEN,
        drain_timeout=0.5,
    )
    summary = report.summary()
    save_summary(f"traffic-{profile}-{scale.name}", summary)
    counts = report.counts()
    assert counts["lost"] == 0 and counts["wrong"] == 0 and counts["failed"] == 0, summary
    assert sum(counts.values()) == len(specs)
    # Both models served some of it: the switches moved the serving each way. (Not a share of the requests: how
    # many finish between two switches is the machine's speed; in a slow hour 15 of 80 did under reconfigure.)
    served = {result.answered_by for result in report.results if result.outcome == "completed"}
    assert served == {"tools", "plain"}, summary
    made = [log for log in report.switches if log.status == 200]
    if profile == "auto":
        # Auto mode switches on its own too: an admin switch that meets one is refused with 409 switch_conflict.
        assert all(log.status in (200, 409) for log in report.switches), summary
    else:
        assert len(made) == switches, summary
    assert "Traceback" not in live.log()[log_start:]


@pytest.mark.live_server("auto")
async def test_template_reloads_under_auto_mode_traffic_all_apply(
    live: LiveServer,
    scale: Scale,
    reliability_models: dict[str, Path],
    completion_prompts: dict[str, str],
    tmp_path: Path,
) -> None:
    # Each reload gives tools another copy of its template: a real change (a new bundle when tools is active),
    # one that renders the same prompt (a comment), so every answer can still be judged by the model's own text.
    template = (TEMPLATES_DIR / TEMPLATES["tools"]).read_text()
    if live.profile is None:
        pytest.skip("a server started outside the suite reads reloads only from its own profile's folder")
    profiles = []
    for version in range(RELOADS):
        copy = tmp_path / f"tools-{version}.jinja"
        copy.write_text(f"{{#- reload {version} -#}}\n{template}")
        # A reload reads only profiles under the served profile's folder (server.reload_dirs' default).
        folder = live.profile.parent / f"reload-{tmp_path.name}-v{version}"
        folder.mkdir()
        path = write_profile(folder, reliability_models, PROFILES["auto"])
        profile = json.loads(path.read_text())
        profile["models"]["tools"]["chat_template"] = str(copy)
        path.write_text(json.dumps(profile))
        profiles.append(path)
    specs = mixed_requests(scale.requests, ["tools", "plain"], seed=7)
    reloads: list[httpx.Response] = []

    async def reload_during_traffic() -> None:
        async with httpx.AsyncClient(base_url=live.url, timeout=300) as admin:
            for path in profiles:
                await asyncio.sleep(RELOAD_GAP_S)
                reloads.append(
                    await admin.post(
                        "/admin/reload", json={"path": str(path)}, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}
                    )
                )

    # Traffic in rounds for as long as the reloads go on, then one more: a warm engine answers a round in a few
    # seconds, sooner than the reloads are spread (one round alone once ended before the last reload).
    reloading = asyncio.create_task(reload_during_traffic())
    runs = [await run_traffic(live.url, specs, prompts=completion_prompts)]
    async with asyncio.timeout(600):
        while not reloading.done():
            runs.append(await run_traffic(live.url, specs, prompts=completion_prompts))
    await reloading
    runs.append(await run_traffic(live.url, specs, prompts=completion_prompts))
    report = TrafficReport.merged(runs)
    summary = report.summary()
    save_summary(f"traffic-auto-reloads-{scale.name}", summary)
    counts = report.counts()
    assert counts["lost"] == 0 and counts["wrong"] == 0 and counts["failed"] == 0, summary
    assert [response.status_code for response in reloads] == [200] * RELOADS, [r.text for r in reloads]
    for response in reloads:
        body = response.json()
        assert body["applied"] is True, body
        (tools,) = [model for model in body["models"] if model["name"] == "tools"]
        assert "chat_template" in tools["frontend"], body
