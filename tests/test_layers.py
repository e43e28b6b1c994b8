"""The layers, held by their imports: ``profiles <- vllm_plugin <- engine || frontend <- api <- cluster <- cli``.

``vllm_plugin`` runs inside vLLM's processes: it may import only the profiles layer (and vLLM), and the engine
layer reads its protocol (utility names and result shapes).

Every ``import server...`` counts, including imports inside functions and under ``TYPE_CHECKING``: a lazy import
is still a dependency. ``tinymodels`` (the test models' builder) stands apart and imports nothing else of ours.

Another package enters ``engine``, ``frontend``, ``api`` and ``cluster`` only through their face (``server.engine``,
...): their inner modules are theirs to move. ``server.frontend.vllm_adapter`` is inner too (the frontend face hands
out its functions lazily, as importing it imports vLLM; the cluster face its Ray application). ``vllm_plugin`` has two
doors: its face (for vLLM and the engine) and ``protocol``, the utility names and result shapes Turnout's process
shares with vLLM's processes. Inside a package anything goes, and tests may import inner modules.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from server.engine.faces import face_names

SERVER = Path(__file__).resolve().parents[1] / "server"
ROOT = ""  # server/__init__.py: the version, nothing else

#: Which layers (top-level subpackages of ``server``) each layer may import besides itself.
ALLOWED: dict[str, frozenset[str]] = {
    "profiles": frozenset(),
    "vllm_plugin": frozenset({"profiles", ROOT}),
    "engine": frozenset({"profiles", "vllm_plugin", ROOT}),
    "frontend": frozenset({"profiles", ROOT}),
    "api": frozenset({"engine", "frontend", "profiles", ROOT}),
    # Turnout on Ray Serve: node replicas run the api's app over the engine manager.
    "cluster": frozenset({"api", "engine", "frontend", "profiles", ROOT}),
    "cli": frozenset({"api", "cluster", "engine", "frontend", "profiles", "tinymodels", "vllm_plugin", ROOT}),
    "tinymodels": frozenset(),
}


#: The packages other packages enter only through these modules (the face, ``server.x`` itself, always).
DOORS: dict[str, frozenset[str]] = {
    "engine": frozenset(),
    "frontend": frozenset(),
    "api": frozenset(),
    "vllm_plugin": frozenset({"server.vllm_plugin.protocol"}),
    "cluster": frozenset(),
    # The version check alone, as vLLM's processes (the plugin) load it without the profile loader.
    "profiles": frozenset({"server.profiles.vllm_version"}),
}
#: Packages that still reach past a face, with the faces they pass: the engine's modules import the profiles'
#: ``schema`` and ``engine_args`` (issue #29, part A refactors the engine). A test fails once one is no longer
#: needed, so that this list only shrinks.
PENDING: dict[str, frozenset[str]] = {"engine": frozenset({"profiles"})}


def layer_of_file(path: Path) -> str:
    parts = path.relative_to(SERVER).parts
    return parts[0] if len(parts) > 1 else ROOT


def layer_of_module(module: str) -> str | None:
    """The layer of ``server.x.y`` (``x``), ROOT for ``server`` itself, None for a module not of ours."""
    parts = module.split(".")
    if parts[0] != "server":
        return None
    return parts[1] if len(parts) > 1 and (SERVER / parts[1]).is_dir() else ROOT


def imported_modules(path: Path) -> set[str]:
    modules: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: use absolute imports, so that this test sees them"
            if node.module:
                modules.add(node.module)
                # `from server import engine` reaches the engine layer.
                modules.update(f"{node.module}.{alias.name}" for alias in node.names)
    return modules


def is_module(module: str) -> bool:
    """Whether ``server.x.y`` names a module or package of ours (not a name imported from one)."""
    path = SERVER.parent.joinpath(*module.split("."))
    return path.is_dir() or path.with_suffix(".py").is_file()


def past_faces() -> list[tuple[str, str]]:
    """Every (file, module) where a package imports an inner module of another package that has a face."""
    found = []
    for path in sorted(SERVER.rglob("*.py")):
        layer = layer_of_file(path)
        for module in sorted(imported_modules(path)):
            target = layer_of_module(module)
            inner = target in DOORS and module != f"server.{target}" and module not in DOORS[target]
            if inner and target != layer and is_module(module):
                found.append((str(path.relative_to(SERVER.parent)), module))
    return found


def layer_imports() -> list[tuple[str, str, str]]:
    """Every (file, importing layer, imported layer) of the package, the layer's own imports left out."""
    found = []
    for path in sorted(SERVER.rglob("*.py")):
        layer = layer_of_file(path)
        for module in sorted(imported_modules(path)):
            target = layer_of_module(module)
            if target is not None and target != layer:
                found.append((str(path.relative_to(SERVER.parent)), layer, target))
    return found


def test_every_layer_is_known() -> None:
    layers = {path.name for path in SERVER.iterdir() if (path / "__init__.py").is_file()}
    assert layers == set(ALLOWED) - {ROOT}


def test_the_scan_sees_imports_across_layers() -> None:
    # The test must be able to fail: the imports it checks are there to be seen.
    seen = {(layer, target) for _, layer, target in layer_imports()}
    assert {("api", "engine"), ("api", "frontend"), ("engine", "profiles"), ("cli", "api")} <= seen
    assert layer_of_module("server.api.errors.x") == "api"
    assert layer_of_module("server") == ROOT
    assert layer_of_module("msgspec") is None


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_imports_run_down_the_layers(layer: str) -> None:
    broken = [
        f"{file}: {importer} imports {target or 'server'}"
        for file, importer, target in layer_imports()
        if importer == layer and target not in ALLOWED[layer]
    ]
    assert broken == []


def test_the_face_scan_sees_inner_modules_not_names() -> None:
    # The test below must be able to fail: an inner module is told from a name the face exports.
    assert is_module("server.engine.manager")
    assert is_module("server.frontend.vllm_adapter")
    assert not is_module("server.engine.EngineManager")
    assert not is_module("server.frontend.build_bundle")


def _importer(file: str) -> str:
    return layer_of_file(SERVER.parent / file)


@pytest.mark.parametrize("target", sorted(DOORS))
def test_other_packages_enter_through_the_face(target: str) -> None:
    broken = [
        f"{file} imports {module}"
        for file, module in past_faces()
        if module.split(".")[1] == target and target not in PENDING.get(_importer(file), frozenset())
    ]
    assert broken == []


def test_the_pending_exceptions_are_still_needed() -> None:
    passed = {(_importer(file), module.split(".")[1]) for file, module in past_faces()}
    assert {(layer, target) for layer, targets in PENDING.items() for target in targets} <= passed


#: The layers as ``server/__init__.py`` states them, lowest first (``||``: side by side).
CHAIN = "profiles <- vllm_plugin <- engine || frontend <- api <- cluster <- cli"


def test_the_package_docstring_states_the_layers_the_rules_hold() -> None:
    import server

    assert f"``{CHAIN}``" in (server.__doc__ or "")
    below: dict[str, set[str]] = {}
    seen: set[str] = set()
    for group in CHAIN.split(" <- "):
        for layer in group.split(" || "):
            below[layer] = set(seen)
        seen |= set(group.split(" || "))
    assert set(below) == set(ALLOWED) - {"tinymodels"}
    upward = {layer: ALLOWED[layer] - {ROOT, "tinymodels"} - below[layer] for layer in below}
    assert {layer: targets for layer, targets in upward.items() if targets} == {}


# -- the engine's rooms (issue #42) --------------------------------------------------------------------------------

ENGINE = SERVER / "engine"
#: The engine's rooms, by role; each is entered through its face (``server.engine.<room>``) from outside it.
ROOMS = frozenset({"admission", "residency", "runtime", "strategies", "supervision", "switching"})
#: What may stay at the engine's top: its face, the manager and what it reports, the factory, errors, metrics.
MOST_TOP_MODULES = 12


def room_of(path: Path, engine: Path = ENGINE) -> str | None:
    """The engine room ``path`` is in (None: not in a room)."""
    if not path.is_relative_to(engine):
        return None
    parts = path.relative_to(engine).parts
    return parts[0] if len(parts) > 1 else None


def past_room_faces(root: Path = SERVER) -> list[str]:
    """Every ``file imports module`` where a module outside a room imports one of the room's inner modules."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for module in sorted(imported_modules(path)):
            parts = module.split(".")
            inner = parts[:2] == ["server", "engine"] and len(parts) > 3 and parts[2] in ROOMS and is_module(module)
            handed_out = inner and len(parts) == 4 and parts[3] in face_names(ENGINE / parts[2] / "__init__.py")
            if inner and not handed_out and room_of(path, root / "engine") != parts[2]:
                found.append(f"{path.relative_to(root.parent)} imports {module}")
    return found


def test_the_rooms_are_the_engines_subpackages() -> None:
    assert {path.parent.name for path in ENGINE.glob("*/__init__.py")} == ROOMS


def test_other_rooms_enter_a_room_through_its_face() -> None:
    assert past_room_faces() == []


def test_the_room_scan_sees_an_inner_import(tmp_path: Path) -> None:
    # The test above must be able to fail: the manager importing the device's module past the switching room's face;
    # the device's own room may.
    (tmp_path / "server" / "engine" / "switching").mkdir(parents=True)
    (tmp_path / "server" / "engine" / "manager.py").write_text(
        "from server.engine.switching.device import Device\nfrom server.engine.switching import Slot\n"
    )
    (tmp_path / "server" / "engine" / "switching" / "switch.py").write_text(
        "from server.engine.switching.device import Device\n"
    )
    assert past_room_faces(tmp_path / "server") == ["server/engine/manager.py imports server.engine.switching.device"]


def test_few_modules_stay_at_the_engines_top() -> None:
    top = sorted(path.name for path in ENGINE.glob("*.py"))
    assert len(top) <= MOST_TOP_MODULES, top


@pytest.mark.parametrize("room", sorted(ROOMS))
def test_every_name_a_face_hands_out_is_there(room: str) -> None:
    face = importlib.import_module(f"server.engine.{room}")
    assert sorted(face.__all__) == sorted(face_names(ENGINE / room / "__init__.py")), "its list and its imports agree"
    missing = [name for name in face.__all__ if getattr(face, name, None) is None]
    assert missing == []
    with pytest.raises(AttributeError):
        face.NoSuchName  # noqa: B018


def vllm_importers(root: Path = ENGINE) -> list[str]:
    """The engine's modules that import vLLM, outside its runtime room."""
    return [
        str(path.relative_to(root))
        for path in sorted(root.rglob("*.py"))
        if room_of(path, root) != "runtime"
        and any(module == "vllm" or module.startswith("vllm.") for module in imported_modules(path))
    ]


def test_the_engine_imports_vllm_only_in_its_runtime_room(tmp_path: Path) -> None:
    assert vllm_importers() == []
    # A name a new vLLM moved is handled in one room; the scan sees a stray import.
    (tmp_path / "switching").mkdir()
    (tmp_path / "switching" / "device.py").write_text("from vllm.v1.engine.async_llm import AsyncLLM\n")
    (tmp_path / "runtime").mkdir()
    (tmp_path / "runtime" / "vllm_loader.py").write_text("import vllm\n")
    assert vllm_importers(tmp_path) == ["switching/device.py"]
