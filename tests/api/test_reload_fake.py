"""``POST /admin/reload`` and ``serve --watch`` in process: real profile files and validation, fake engines."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from server.api import ReloadUnavailable
from server.api.reload.profile_watch import watch_profile
from tests.api.conftest import MakeClient, admin
from tests.api.served_profile import Served, serve_profile

PROFILE = """\
models:
  tools:
    model: models/tiny
    chat_template: templates/tools.jinja
    enable_auto_tool_choice: true
    tool_call_parser: hermes
  plain:
    model: models/tiny
    max_model_len: 128
switching:
  strategy: keep
"""


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    served = await serve_profile(tmp_path, PROFILE)
    yield served
    await served.close()


async def test_a_template_edited_in_place_gets_a_new_bundle_at_once(served: Served) -> None:
    before = served.manager.published
    assert before is not None
    template = served.workspace / "templates" / "tools.jinja"
    template.write_text(template.read_text() + "{# v2 #}\n")
    response = await served.reload()
    assert response.status_code == 200, response.text
    report = response.json()
    assert report["applied"] and report["changed"]
    assert [(m["name"], m["frontend"], m["frontend_effect"], m["engine"]) for m in report["models"]] == [
        ("tools", ["chat_template"], "now", [])
    ]
    after = served.manager.published
    assert after is not None and after.bundle is not before.bundle and after.bundle.engine is before.bundle.engine
    # Saved again without edits: nothing to do.
    assert (await served.reload()).json()["changed"] is False


async def test_a_frontend_change_is_served_at_once(served: Served) -> None:
    chat = {"model": "tools", "messages": [], "tool_choice": "auto", "max_tokens": 1}
    assert (await served.client.post("/v1/chat/completions", json=chat)).status_code == 200
    served.write(PROFILE.replace("enable_auto_tool_choice: true", "enable_auto_tool_choice: false"))
    assert (await served.reload()).status_code == 200
    response = await served.client.post("/v1/chat/completions", json=chat)
    assert response.status_code == 400 and "auto" in response.json()["error"]["message"]


async def test_an_invalid_profile_is_refused_with_every_error_and_nothing_changes(served: Served) -> None:
    before = served.manager.published
    served.write(
        PROFILE.replace("tool_call_parser: hermes", "tool_call_parser: hermez")
        .replace("max_model_len: 128", "max_model_len: lots")
        .replace("strategy: keep", "strategy: bogus")
    )
    response = await served.reload()
    assert response.status_code == 422
    body = response.json()
    assert set(body["error"]) == {"message", "type", "param", "code"} and body["error"]["code"] == "invalid_profile"
    shown = str(served.profile)
    positions = [(i["line"], i["col"]) for i in body["issues"] if i["severity"] == "error"]
    assert positions == [(6, 23), (9, 20), (11, 13)]
    for line, col in positions:
        assert f"{shown}:{line}:{col}: " in body["error"]["message"]
    assert "3 error(s); nothing changed" in body["error"]["message"]
    assert served.manager.published is before and list(served.manager.models) == ["tools", "plain"]
    assert served.manager.models["tools"].tool_call_parser == "hermes"


async def test_removing_the_active_model_is_refused(served: Served) -> None:
    served.write(PROFILE.replace("  tools:", "  other:"))
    response = await served.reload()
    assert response.status_code == 409 and response.json()["error"]["code"] == "reload_refused"
    assert "'tools'" in response.json()["error"]["message"]
    assert list(served.manager.models) == ["tools", "plain"]


async def test_models_are_added_and_engine_changes_are_reported_per_model(served: Served) -> None:
    served.write(
        PROFILE.replace("max_model_len: 128", "max_model_len: 256")
        .replace("    tool_call_parser: hermes\n", "    tool_call_parser: hermes\n    max_model_len: 64\n")
        .replace("switching:\n  strategy: keep", "  third:\n    model: models/tiny\nswitching:\n  strategy: stop")
    )
    dry = (await served.reload(dry_run=True)).json()
    assert dry["applied"] is False and list(served.manager.models) == ["tools", "plain"]
    report = (await served.reload()).json()
    models = {m["name"]: m for m in report["models"]}
    assert models["tools"]["engine"] == ["max_model_len"] and models["tools"]["engine_effect"] == "next_load"
    assert "keeps the old ones until a switch leaves it" in models["tools"]["note"]
    assert models["plain"]["engine_effect"] == "next_load" and models["third"]["change"] == "added"
    assert report["restart_only"] == ["switching.strategy"]
    ids = [m["id"] for m in (await served.client.get("/v1/models")).json()["data"]]
    assert ids == ["tools", "plain", "third"]


async def test_reload_is_admin_only_and_takes_a_path(served: Served) -> None:
    assert (await served.client.post("/admin/reload", json={})).status_code == 401
    other = served.workspace / "other.yaml"
    other.write_text(PROFILE.replace("  plain:", "  plain2:"))
    response = await served.reload(path=str(other))
    assert response.status_code == 200 and response.json()["profile"] == str(other)
    assert served.reloader.profile.path == str(other)
    missing = await served.reload(path=str(served.workspace / "nope.yaml"))
    assert missing.status_code == 422 and "nope.yaml:1:1" in missing.json()["error"]["message"]


async def _until(condition: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_watch_applies_saved_files_and_refuses_broken_ones(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="turnout.api")
    watcher = asyncio.create_task(watch_profile(served.reloader, debounce_ms=50))
    try:
        await _until(lambda: "watching" in caplog.text)
        await asyncio.sleep(0.3)  # the watch is set up once awatch runs
        before = served.manager.published
        template = served.workspace / "templates" / "tools.jinja"
        template.write_text(template.read_text() + "{# watched #}\n")
        await _until(lambda: served.manager.published is not before)
        served.write(PROFILE.replace("strategy: keep", "strategy: bogus"))
        await _until(lambda: "nothing changed" in caplog.text)
        assert f"{served.profile}:11:13: " in caplog.text
        assert list(served.manager.models) == ["tools", "plain"]
    finally:
        watcher.cancel()
        with pytest.raises(asyncio.CancelledError):
            await watcher


async def test_reload_reads_only_profiles_under_the_allowed_folders(
    served: Served, tmp_path_factory: pytest.TempPathFactory
) -> None:
    tmp_path = tmp_path_factory.mktemp("elsewhere")
    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0:SECRET-LINE\n")
    outside = tmp_path / "outside.yaml"
    outside.write_text(PROFILE)
    inside_text = served.workspace / "notes.txt"
    inside_text.write_text("SECRET-LINE\n")
    link = served.workspace / "link.yaml"
    link.symlink_to(secret)
    for path in (
        secret,
        outside,
        inside_text,
        link,
        served.workspace / "../../../../../../../../etc/passwd",
        Path("/etc/passwd"),
    ):
        response = await served.reload(path=str(path))
        assert response.status_code == 403, (path, response.text)
        assert response.json()["error"]["code"] == "reload_path_refused"
        assert "SECRET" not in response.text and "root:" not in response.text
    assert served.reloader.profile.path == str(served.profile)


async def test_reload_dirs_widen_the_allowed_folders_from_the_profiles_folder(tmp_path: Path) -> None:
    from server.api.reload.reload_paths import ReloadPathRefused, ReloadPaths

    (tmp_path / "conf" / "more").mkdir(parents=True)
    profile = tmp_path / "conf" / "profile.yaml"
    paths = ReloadPaths(str(profile), ["more", str(tmp_path / "abs")])
    assert paths.check(str(profile)) == str(profile)
    assert paths.check(str(tmp_path / "conf" / "more" / "p.yml"))
    assert paths.check(str(tmp_path / "abs" / "deep" / "p.json"))
    for refused in (tmp_path / "conf" / "p.yaml", tmp_path / "conf" / "more-evil" / "p.yaml", tmp_path / "p.yaml"):
        with pytest.raises(ReloadPathRefused):
            paths.check(str(refused))


async def test_a_nul_byte_in_the_path_is_a_400_in_the_api_shape(served: Served) -> None:
    # Before: os.path.realpath raised ValueError ("embedded null byte") and the reload answered 500.
    response = await served.reload(path=str(served.workspace / "pro\x00file.yaml"))
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_reload_path" and "NUL" in error["message"]
    assert "Traceback" not in response.text
    assert served.reloader.profile.path == str(served.profile)


def _secret_outside(tmp_path_factory: pytest.TempPathFactory) -> Path:
    secret = tmp_path_factory.mktemp("elsewhere") / "secret.yaml"
    secret.write_text("root:x:0:0:SECRET-LINE\n")
    return secret


async def test_a_symlink_swapped_in_between_the_check_and_the_read_is_refused_unread(
    served: Served, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race: the path passes the check as a regular file, then becomes a link to a file outside before the
    reload reads it. The read is the checked resolved path opened without following links, so it fails."""
    from server.api.reload.reload_paths import ReloadPaths

    secret = _secret_outside(tmp_path_factory)
    target = served.workspace / "next.yaml"
    target.write_text(PROFILE)
    check = ReloadPaths.check

    def check_then_swap(self: ReloadPaths, path: str) -> str:
        checked = check(self, path)
        target.unlink()
        target.symlink_to(secret)
        return checked

    monkeypatch.setattr(ReloadPaths, "check", check_then_swap)
    response = await served.reload(path=str(target))
    assert response.status_code == 403, response.text
    assert response.json()["error"]["code"] == "reload_path_refused"
    assert "SECRET" not in response.text and "root:" not in response.text
    assert served.reloader.profile.path == str(served.profile)


async def test_a_folder_swapped_for_a_symlink_after_the_check_is_refused_unread(
    served: Served, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from server.api.reload.reload_paths import ReloadPaths

    secret = _secret_outside(tmp_path_factory)
    folder = served.workspace / "more"
    folder.mkdir()
    (folder / "secret.yaml").write_text(PROFILE)
    check = ReloadPaths.check

    def check_then_swap(self: ReloadPaths, path: str) -> str:
        checked = check(self, path)
        (folder / "secret.yaml").unlink()
        folder.rmdir()
        folder.symlink_to(secret.parent)
        return checked

    monkeypatch.setattr(ReloadPaths, "check", check_then_swap)
    response = await served.reload(path=str(folder / "secret.yaml"))
    assert response.status_code == 403, response.text
    assert "SECRET" not in response.text


async def test_the_validator_is_fed_what_the_checked_descriptor_read(served: Served) -> None:
    """The profile is parsed from the bytes read through the checked descriptor, never from the path again."""
    seen: list[tuple[str, bytes | None]] = []
    source: Any = served.reloader._source
    validate = source.load

    def recording(path: str, data: bytes | None = None) -> Any:
        seen.append((path, data))
        return validate(path, data)

    source.load = recording
    other = served.workspace / "other.yaml"
    other.write_text(PROFILE.replace("  plain:", "  plain2:"))
    response = await served.reload(path=str(other), dry_run=True)
    assert response.status_code == 200, response.text
    assert seen == [(str(other), other.read_bytes())]


@pytest.mark.parametrize(
    ("reloader", "reason"),
    [
        (None, "started without a profile file"),
        (ReloadUnavailable(reason="redeploy the application instead"), "redeploy the application instead"),
    ],
)
async def test_a_server_that_cannot_reload_says_why_in_a_501(
    make_client: MakeClient, reloader: ReloadUnavailable | None, reason: str
) -> None:
    client, manager = await make_client(reloader=reloader)
    response = await client.post("/admin/reload", json={}, headers=admin())
    assert response.status_code == 501
    error = response.json()["error"]
    assert error["code"] == "reload_unavailable"
    assert reason in error["message"]
    assert manager.snapshot().active_model == "tools"  # nothing changed
