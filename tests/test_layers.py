"""The layers, held by their imports: ``profiles <- vllm_plugin <- engine || frontend <- api <- cluster <- cli``.

``vllm_plugin`` runs inside vLLM's processes: it may import only the profiles layer (and vLLM), and the engine
layer reads its protocol (utility names and result shapes).

Every ``import server...`` counts, including imports inside functions and under ``TYPE_CHECKING``: a lazy import
is still a dependency. ``tinymodels`` (the test models' builder) stands apart and imports nothing else of ours.

Another package enters ``engine``, ``frontend``, ``api`` and ``cluster`` only through the public names of their
``__init__`` (``server.engine``, ...): their inner modules are theirs to move. ``server.frontend.vllm_adapter`` is inner
too: the frontend's ``__init__`` looks its functions up on first use, as importing it imports vLLM, and the cluster's
its Ray application (the one gate that keeps vLLM and Ray out of ``turnout validate``, held below). ``vllm_plugin`` has
two doors: its ``__init__`` (for vLLM and the engine) and ``protocol``, the utility names and result shapes Turnout's
process shares with vLLM's processes. Inside a package anything goes, and tests may import inner modules.

Inside the engine the packages are ordered too (``ENGINE_ORDER``, drawn in ``docs/design.md``): the plain types
they share at the bottom (``server.engine.types``), and no package imports one above it. The api's packages are held
the same way (``API_ORDER``): its settings at the bottom, then the edge checks, up to the app and the stack.
"""

from __future__ import annotations

import ast
import graphlib
import importlib
from pathlib import Path

import pytest

from tests.fresh_python import fresh_python

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
#: Packages that still reach past another's ``__init__``, with the packages they reach into: the engine's modules
#: import the profiles' ``schema`` and ``engine_args``, which the profiles' ``__init__`` does not name yet. A test fails
#: once one is no longer needed, so that this list only shrinks.
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


# -- the engine's packages -----------------------------------------------------------------------------------------

ENGINE = SERVER / "engine"
#: The engine's packages and top modules ("units"), lowest first: a unit may import only units on earlier lines.
#: ``docs/design.md`` draws the same order; a new package or top module must take its place here.
ENGINE_ORDER: tuple[tuple[str, ...], ...] = (
    ("types", "memory", "engine_metrics"),  # plain data and protocols; readings of the host's memory; counters
    ("residency",),  # pure planning: who may stay loaded, KV-cache sizes
    ("supervision",),  # engine watches and the healer
    ("runtime",),  # vLLM's engines, processes and the warm launcher
    ("strategies",),  # how a model is parked and brought up
    ("switching",),  # the model slots and a switch
    ("admission",),  # who runs, who waits, who gets the slots next
    ("simulation",),  # the scheduler and the residency policy on a fake clock (turnout simulate)
    ("residency_controls",),  # loads and unloads without a switch
    ("manager_status",),
    ("manager",),
    ("factory",),
)
#: The order as ``docs/design.md`` states it (``||``: side by side).
ENGINE_CHAIN = " <- ".join(" || ".join(level) for level in ENGINE_ORDER)
#: At most this many modules stay at the engine's top: its ``__init__``, the manager and its helpers, the factory.
MOST_TOP_MODULES = 12


def unit_of(module: str, layer: str = "engine") -> str | None:
    """The unit of ``server.<layer>.x.y`` (``x``), None for the layer's ``__init__`` or a module not of it."""
    parts = module.split(".")
    return parts[2] if parts[:2] == ["server", layer] and len(parts) > 2 else None


def engine_unit_imports(engine: Path = ENGINE) -> dict[tuple[str, str], list[str]]:
    """(importing unit, imported unit) to the ``file:line`` of each import, every ``import`` statement counted (inside
    functions and under ``TYPE_CHECKING`` too); ``engine`` is a ``server/engine`` folder, or another layer's
    (``server/api``: its units are its packages and top modules the same way)."""
    layer = engine.name
    found: dict[tuple[str, str], list[str]] = {}
    for path in sorted(engine.rglob("*.py")):
        parts = path.relative_to(engine).parts
        unit = parts[0].removesuffix(".py")
        if parts == ("__init__.py",):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            modules: list[str] = []
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif node.module:
                modules = [node.module]
                if node.module == f"server.{layer}":
                    modules = [f"server.{layer}.{alias.name}" for alias in node.names]
            for module in modules:
                target = unit_of(module, layer)
                if (
                    target is not None
                    and target != unit
                    and ((engine / target).exists() or (engine / f"{target}.py").exists())
                ):
                    found.setdefault((unit, target), []).append(f"{path.relative_to(engine.parent)}:{node.lineno}")
    return found


def engine_unit_cycle(engine: Path = ENGINE) -> list[str]:
    """A cycle of imports between the engine's units (empty: none)."""
    graph: dict[str, set[str]] = {}
    for unit, target in engine_unit_imports(engine):
        graph.setdefault(unit, set()).add(target)
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as error:
        return list(error.args[1])
    return []


def engine_units() -> set[str]:
    return {path.name.removesuffix(".py") for path in ENGINE.iterdir() if path.suffix == ".py" or path.is_dir()} - {
        "__init__",
        "__pycache__",
    }


def test_no_import_cycle_between_the_engines_packages() -> None:
    assert engine_unit_cycle() == []


def test_the_cycle_scan_sees_a_cycle_under_type_checking(tmp_path: Path) -> None:
    # The test above must be able to fail: the model slots reading the scheduler's view under TYPE_CHECKING, while the
    # scheduler imports the slots.
    engine = tmp_path / "server" / "engine"
    for package in ("switching", "admission"):
        (engine / package).mkdir(parents=True)
        (engine / package / "__init__.py").write_text("")
    (engine / "switching" / "device.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from server.engine.admission import SwitchView\n"
    )
    (engine / "admission" / "gate.py").write_text("def f():\n    from server.engine.switching import ModelSlots\n")
    assert sorted(set(engine_unit_cycle(engine))) == ["admission", "switching"]


def test_every_engine_package_has_its_place_in_the_order() -> None:
    placed = [unit for level in ENGINE_ORDER for unit in level]
    assert len(placed) == len(set(placed))
    assert engine_units() == set(placed)


def test_engine_packages_import_only_those_below() -> None:
    level = {unit: number for number, units in enumerate(ENGINE_ORDER) for unit in units}
    upward = [
        f"{unit} imports {target}: {', '.join(where)}"
        for (unit, target), where in sorted(engine_unit_imports().items())
        if level[target] >= level[unit]
    ]
    assert upward == []


def test_the_order_is_the_one_the_design_draws() -> None:
    design = (SERVER.parent / "docs" / "design.md").read_text(encoding="utf-8")
    assert f"``{ENGINE_CHAIN}``" in design


# -- the api's packages --------------------------------------------------------------------------------------------

API = SERVER / "api"
#: The api's packages and top modules, lowest first, as the engine's: a unit may import only units on earlier lines.
#: ``docs/design.md`` draws the same order; a new package or top module must take its place here.
API_ORDER: tuple[tuple[str, ...], ...] = (
    ("settings", "openapi", "gateway_metrics"),  # the app's settings; the OpenAPI document; the gateway's series
    ("edge",),  # what a request meets first: the host and site checks, keys and their scopes, names, bounds, secrets
    ("errors", "metrics"),  # every error in its API's shape; /metrics
    ("admission", "reload"),  # who gets in (connections, requests, their leases); a changed profile applied
    ("streaming",),  # how an answer leaves: JSON or an SSE stream, waiting, stalls, clients that leave
    ("controllers",),  # the operations: the routes
    ("app",),
    ("route_table", "stack"),  # the Ray ingress's view of the routes; from a profile file to a running stack
)
#: The order as ``docs/design.md`` states it (``||``: side by side).
API_CHAIN = " <- ".join(" || ".join(level) for level in API_ORDER)
#: At most this many modules stay at the api's top: its ``__init__``, the app and what every package shares.
MOST_API_TOP_MODULES = 8


def api_units() -> set[str]:
    units = {path.name.removesuffix(".py") for path in API.iterdir() if path.suffix == ".py"}
    return (units | {path.parent.name for path in API.glob("*/__init__.py")}) - {"__init__"}


def test_no_import_cycle_between_the_apis_packages() -> None:
    assert engine_unit_cycle(API) == []


def test_the_cycle_scan_sees_a_cycle_in_the_api(tmp_path: Path) -> None:
    # The test above must be able to fail: the error shapes importing the streaming package's disconnect, while
    # streaming imports the error shapes.
    api = tmp_path / "server" / "api"
    (api / "streaming").mkdir(parents=True)
    (api / "streaming" / "__init__.py").write_text("")
    (api / "streaming" / "delivery.py").write_text("from server.api.errors import ApiShape\n")
    (api / "errors.py").write_text("from server.api.streaming.disconnects import ClientLeft\n")
    assert sorted(set(engine_unit_cycle(api))) == ["errors", "streaming"]


def test_every_api_package_has_its_place_in_the_order() -> None:
    placed = [unit for level in API_ORDER for unit in level]
    assert len(placed) == len(set(placed))
    assert api_units() == set(placed)


def test_api_packages_import_only_those_below() -> None:
    level = {unit: number for number, units in enumerate(API_ORDER) for unit in units}
    upward = [
        f"{unit} imports {target}: {', '.join(where)}"
        for (unit, target), where in sorted(engine_unit_imports(API).items())
        if level[target] >= level[unit]
    ]
    assert upward == []


def test_the_api_order_is_the_one_the_design_draws() -> None:
    design = (SERVER.parent / "docs" / "design.md").read_text(encoding="utf-8")
    assert f"``{API_CHAIN}``" in design


def test_few_modules_stay_at_the_apis_top() -> None:
    top = sorted(path.name for path in API.glob("*.py"))
    assert len(top) <= MOST_API_TOP_MODULES, top


def public_names(init: Path) -> dict[str, ast.stmt]:
    """The names an ``__init__`` binds with its own top-level imports, to the import that binds them."""
    names: dict[str, ast.stmt] = {}
    for node in ast.parse(init.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ImportFrom) and node.module != "__future__":
            names.update((alias.asname or alias.name, node) for alias in node.names)
    return names


#: The layers whose packages are entered through their ``__init__`` by the rest of the layer too.
PACKAGED_LAYERS = ("engine", "api")


def past_package_inits(root: Path = SERVER) -> list[str]:
    """Every ``file imports module`` where a module outside an engine or api package imports one of its inner modules
    (a module the package's ``__init__`` names as a public name, like ``residency.policy``, may be imported)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for module in sorted(imported_modules(path)):
            parts = module.split(".")
            packaged = len(parts) > 3 and parts[0] == "server" and parts[1] in PACKAGED_LAYERS
            package = root / parts[1] / parts[2] if packaged else None
            if package is None or not (package / "__init__.py").is_file():
                continue
            inside = path.is_relative_to(package)
            named = len(parts) == 4 and parts[3] in public_names(package / "__init__.py")
            if not inside and not named and is_module(module):
                found.append(f"{path.relative_to(root.parent)} imports {module}")
    return found


def test_other_packages_enter_an_engine_package_through_its_init() -> None:
    assert past_package_inits() == []


def test_the_init_scan_sees_an_inner_import(tmp_path: Path) -> None:
    # The test above must be able to fail: the manager importing the model slots' module past the switching package's
    # __init__; the switching package itself may.
    (tmp_path / "server" / "engine" / "switching").mkdir(parents=True)
    (tmp_path / "server" / "engine" / "switching" / "__init__.py").write_text("")
    (tmp_path / "server" / "engine" / "manager.py").write_text(
        "from server.engine.switching.model_slots import ModelSlots\nfrom server.engine.switching import ModelSlots\n"
    )
    (tmp_path / "server" / "engine" / "switching" / "switch.py").write_text(
        "from server.engine.switching.model_slots import ModelSlots\n"
    )
    # The same in the api: the app importing the key ring's module past the edge package's __init__.
    (tmp_path / "server" / "api" / "edge").mkdir(parents=True)
    (tmp_path / "server" / "api" / "edge" / "__init__.py").write_text("")
    (tmp_path / "server" / "api" / "app.py").write_text("from server.api.edge.key_ring import KeyRing\n")
    assert past_package_inits(tmp_path / "server") == [
        "server/api/app.py imports server.api.edge.key_ring",
        "server/engine/manager.py imports server.engine.switching.model_slots",
    ]


def test_few_modules_stay_at_the_engines_top() -> None:
    top = sorted(path.name for path in ENGINE.glob("*.py"))
    assert len(top) <= MOST_TOP_MODULES, top


def layer_packages() -> list[str]:
    """The engine's and the api's packages, as ``layer.package``."""
    return sorted(
        f"{layer}.{path.parent.name}" for layer in PACKAGED_LAYERS for path in (SERVER / layer).glob("*/__init__.py")
    )


@pytest.mark.parametrize("package", layer_packages())
def test_a_package_names_its_public_names_with_ordinary_imports(package: str) -> None:
    init = SERVER.joinpath(*package.split("."), "__init__.py")
    module = importlib.import_module(f"server.{package}")
    assert sorted(module.__all__) == sorted(public_names(init)), "its list and its imports agree"
    assert all(getattr(module, name, None) is not None for name in module.__all__)
    assert not hasattr(module, "__getattr__")


def _binds_module_getattr(tree: ast.Module) -> bool:
    """Whether a module defines or assigns ``__getattr__`` outside a class (under an ``if`` too)."""
    in_classes = {id(node) for cls in ast.walk(tree) if isinstance(cls, ast.ClassDef) for node in ast.walk(cls)}
    return any(
        id(node) not in in_classes
        and (
            (isinstance(node, ast.FunctionDef) and node.name == "__getattr__")
            or (isinstance(node, ast.Name) and node.id == "__getattr__" and isinstance(node.ctx, ast.Store))
        )
        for node in ast.walk(tree)
    )


def lazy_lookups(root: Path = ENGINE) -> list[str]:
    """The engine's modules that bind a module ``__getattr__`` (a lazy import that would hide a cycle)."""
    return [
        str(path.relative_to(root.parent))
        for path in sorted(root.rglob("*.py"))
        if _binds_module_getattr(ast.parse(path.read_text(encoding="utf-8")))
    ]


def test_no_lazy_lookup_inside_the_engine(tmp_path: Path) -> None:
    assert lazy_lookups() == []
    assert lazy_lookups(API) == []
    (tmp_path / "engine").mkdir()
    (tmp_path / "engine" / "__init__.py").write_text("def __getattr__(name):\n    raise AttributeError(name)\n")
    (tmp_path / "engine" / "face.py").write_text("if TYPE_CHECKING:\n    pass\nelse:\n    __getattr__ = lazy_face()\n")
    (tmp_path / "engine" / "proxy.py").write_text("class Proxy:\n    def __getattr__(self, name):\n        pass\n")
    assert lazy_lookups(tmp_path / "engine") == ["engine/__init__.py", "engine/face.py"]


def vllm_importers(root: Path = ENGINE) -> list[str]:
    """The engine's modules that import vLLM, outside its runtime package."""
    return [
        str(path.relative_to(root))
        for path in sorted(root.rglob("*.py"))
        if path.relative_to(root).parts[0] != "runtime"
        and any(module == "vllm" or module.startswith("vllm.") for module in imported_modules(path))
    ]


def test_the_engine_imports_vllm_only_in_its_runtime_package(tmp_path: Path) -> None:
    assert vllm_importers() == []
    # A name a new vLLM moved is handled in one package; the scan sees a stray import.
    (tmp_path / "switching").mkdir()
    (tmp_path / "switching" / "model_slots.py").write_text("from vllm.v1.engine.async_llm import AsyncLLM\n")
    (tmp_path / "runtime").mkdir()
    (tmp_path / "runtime" / "vllm_loader.py").write_text("import vllm\n")
    assert vllm_importers(tmp_path) == ["switching/model_slots.py"]


#: What ``turnout validate`` must not import: vLLM and torch (seconds, and absent where only profiles are checked),
#: Ray, and the web framework. The frontend's and the cluster's ``__init__`` keep them out by looking up the modules
#: that import them on first use.
HEAVY = ("vllm", "torch", "ray", "litestar")


def _imported_after_validate(profile: Path) -> list[str]:
    code = (
        "import sys; from click.testing import CliRunner; from server.cli.main import main; "
        f"r = CliRunner().invoke(main, ['validate', {str(profile)!r}]); "
        f"print(r.exit_code, [m for m in {HEAVY!r} if m in sys.modules])"
    )
    return fresh_python(code).splitlines()[-1:]


def test_validate_imports_neither_vllm_nor_ray_nor_the_web_framework(tiny_models: dict[str, Path]) -> None:
    demo = SERVER.parent / "profiles" / "demo.yaml"
    assert _imported_after_validate(demo) == ["0 []"]


def test_the_validate_check_sees_a_heavy_import() -> None:
    # The test above must be able to fail: the same check after importing the frontend's vLLM adapter.
    code = f"import sys, server.frontend.vllm_adapter; print([m for m in {HEAVY!r} if m in sys.modules])"
    assert "vllm" in fresh_python(code)


#: The profile loader's entry points, and the only modules outside ``profiles`` that call them: the stack source
#: (``turnout serve``, a reload, a Ray node and its ingress) and ``turnout validate``. Everything else gets its
#: profile from the stack source, so that it is loaded and validated one way, once a process.
PROFILE_LOADERS = frozenset({"load_profile", "validate_profile"})
#: ``turnout simulate`` reads a profile offline as validate does (no vLLM, no Ray) and never serves it.
PROFILE_LOADER_CALLERS = frozenset({"server/api/stack/source.py", "server/cli/validate.py", "server/cli/simulate.py"})


def profile_loader_calls(root: Path = SERVER) -> list[str]:
    """Every ``file calls name`` outside ``profiles`` that calls the profile loader by name or attribute."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if path.is_relative_to(root / "profiles"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                called = node.func
                name = called.id if isinstance(called, ast.Name) else getattr(called, "attr", None)
                if name in PROFILE_LOADERS:
                    found.append(f"{path.relative_to(root.parent).as_posix()} calls {name}")
    return found


def test_only_the_stack_source_and_validate_load_a_profile() -> None:
    callers = {call.split(" calls ")[0] for call in profile_loader_calls()}
    assert callers == PROFILE_LOADER_CALLERS


def test_the_loader_scan_sees_a_call(tmp_path: Path) -> None:
    # The test above must be able to fail: the Ray node's own load of the profile, as it was.
    (tmp_path / "server" / "cluster").mkdir(parents=True)
    (tmp_path / "server" / "cluster" / "build.py").write_text(
        "from server.profiles import load_profile\n\nprofile = load_profile(path, parsers=parser_registry())\n"
    )
    assert profile_loader_calls(tmp_path / "server") == ["server/cluster/build.py calls load_profile"]
