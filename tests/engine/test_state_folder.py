"""The private state folder: created 0700 where XDG says, its files 0600; a folder or file someone else could read,
write or have planted (another user's, open to others, a link) is refused, never used or repaired."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from server.engine import StateDir, state_dir, state_home
from server.vllm_plugin import FolderNotPrivate


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_the_folder_is_made_private_under_xdg_state_home_and_its_files_are_0600(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    folder = state_dir()

    assert folder.root == state_home() == tmp_path / "state" / "turnout"
    assert _mode(folder.root) == 0o700
    path = folder.write_private("admin-token", "secret\n")
    assert path == folder.root / "admin-token" and _mode(path) == 0o600
    assert folder.read_private("admin-token") == "secret\n"
    assert folder.read_private("absent") is None
    assert os.listdir(folder.root) == ["admin-token"]  # the fresh name it was written under is gone


def test_without_xdg_state_home_the_folder_is_under_the_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert state_home() == tmp_path / ".local" / "state" / "turnout"


@pytest.mark.parametrize("mode", [0o755, 0o770, 0o707])
def test_a_folder_open_to_others_is_refused_and_left_as_it_is(tmp_path: Path, mode: int) -> None:
    root = tmp_path / "turnout"
    root.mkdir()
    root.chmod(mode)
    with pytest.raises(FolderNotPrivate, match="not 700"):
        StateDir(root)
    assert _mode(root) == mode


@pytest.mark.skipif(os.geteuid() != 0, reason="handing a folder to another user needs root")
def test_another_users_folder_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "turnout"
    root.mkdir(mode=0o700)
    os.chown(root, 12345, 12345)
    with pytest.raises(FolderNotPrivate, match="belongs to uid 12345"):
        StateDir(root)


def test_a_planted_link_is_never_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (tmp_path / "turnout").symlink_to(elsewhere)
    with pytest.raises(FolderNotPrivate, match="link"):
        StateDir(tmp_path / "turnout")

    folder = StateDir(tmp_path / "own")
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    (folder.root / "admin-token").symlink_to(victim)
    with pytest.raises(FolderNotPrivate, match="link"):
        folder.read_private("admin-token")
    folder.write_private("admin-token", "new")  # replaces the link itself, not what it points to
    assert victim.read_text() == "untouched"
    assert not (folder.root / "admin-token").is_symlink() and folder.read_private("admin-token") == "new"


def test_a_file_others_may_read_is_not_read(tmp_path: Path) -> None:
    folder = StateDir(tmp_path / "turnout")
    path = folder.write_private("admin-token", "secret")
    path.chmod(0o644)
    with pytest.raises(FolderNotPrivate, match="not a private file"):
        folder.read_private("admin-token")


def test_names_stay_inside_the_folder(tmp_path: Path) -> None:
    folder = StateDir(tmp_path / "turnout")
    for name in ("../escape", "a/b", ".hidden", ""):
        with pytest.raises(ValueError, match="plain file name"):
            folder.path(name)


def test_a_run_folder_is_private_and_removed(tmp_path: Path) -> None:
    folder = StateDir(tmp_path / "turnout")
    run = folder.run_folder("ray-secrets")
    assert run.parent == folder.root and _mode(run) == 0o700
    StateDir(run).write_private("KEY", "value")
    folder.remove_folder(run)
    assert not run.exists()
    outside = tmp_path / "outside"
    outside.mkdir()
    folder.remove_folder(outside)  # not one of its own: left alone
    assert outside.is_dir()


def test_the_folder_is_made_with_0700_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        folder = StateDir(tmp_path / "turnout")
        path = folder.write_private("f", "x")
    finally:
        os.umask(old)
    assert (_mode(folder.root), _mode(path)) == (0o700, 0o600)
