"""The engine's census: the numbers a refactor of the engine is judged by, measured the same way before and after.

Run it: ``python -m tests.engine.engine_room_census``. It prints one line per measure. ``test_engine_room.py`` holds
the measures that must stay at their target.

Measures:
    * modules and lines in ``server/engine``;
    * the engine modules one manual ``POST /switch`` passes through (traced: every engine module with a function
      called while ``EngineManager.switch`` runs a switch between two fake engines);
    * callers of the device's changing methods, per module (a method changes the device when it assigns a
      ``self._`` field, or calls one that does, or moves a slot);
    * the places that tell the scheduler something changed (calls on an admission or scheduler object of the
      scheduler's change events), outside ``admission.py`` and ``scheduler.py``;
    * import circles inside ``server/engine`` (``TYPE_CHECKING`` imports count);
    * facts stated twice inside ``server/engine`` (each counted as how many places state it).
"""

from __future__ import annotations

import ast
import asyncio
import re
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "server" / "engine"
#: The scheduler's change events: a call of one of these from outside says "something changed".
SCHEDULER_EVENTS = frozenset({"device_changed", "switch_ended", "set_models", "switch_forced", "finished"})
#: The simulator: it drives a scheduler of its own on a fake clock (``turnout simulate``).
SIMULATOR = "simulation.driver"
#: The modules the model slots' owner lives in (once four ``device*`` modules; now ``switching/model_slots.py``).
DEVICE_MODULE = re.compile(r"^(switching\.)?_?(device|model_slots)(_\w+)?$")


def engine_modules() -> dict[str, Path]:
    """Module name (dotted, below ``server.engine``) to path."""
    return {
        ".".join(path.relative_to(ENGINE).with_suffix("").parts).removesuffix(".__init__"): path
        for path in sorted(ENGINE.rglob("*.py"))
    }


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def modules_and_lines() -> tuple[int, int]:
    paths = engine_modules().values()
    return len(paths), sum(len(path.read_text(encoding="utf-8").splitlines()) for path in paths)


# -- import circles -----------------------------------------------------------------------------------------------


def import_graph() -> dict[str, set[str]]:
    """Module to the engine modules it imports (a package's ``__init__`` is the package's name)."""
    modules = engine_modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("server.engine"):
                target = node.module.removeprefix("server.engine").lstrip(".")
                for alias in node.names:
                    # `from server.engine.residency import policy` imports the module; any other name, its package.
                    module = f"{target}.{alias.name}".lstrip(".")
                    graph[name].add(module if module in modules else target)
        graph[name] &= set(modules) - {name}
    return graph


def import_circles() -> list[list[str]]:
    """The strongly connected parts of the engine's import graph with more than one module (Tarjan)."""
    graph = import_graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            part = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                part.append(top)
                if top == node:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for node in graph:
        if node not in index:
            visit(node)
    return sorted(found)


# -- the device's changing methods and their callers ---------------------------------------------------------------


def _device_classes() -> Iterator[ast.ClassDef]:
    for name, path in engine_modules().items():
        if DEVICE_MODULE.match(name):
            yield from (node for node in _tree(path).body if isinstance(node, ast.ClassDef))


def changing_methods() -> set[str]:
    """Public methods of the device's classes that change it (fixpoint over calls between them)."""
    methods: dict[str, ast.AST] = {}
    for cls in _device_classes():
        for node in cls.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                is_property = any(isinstance(d, ast.Name) and d.id == "property" for d in node.decorator_list)
                if not is_property:
                    methods[node.name] = node
    changing: set[str] = set()
    for name, node in methods.items():
        for sub in ast.walk(node):
            targets = (
                sub.targets if isinstance(sub, ast.Assign) else [sub.target] if isinstance(sub, ast.AugAssign) else []
            )
            for target in targets:
                for t in ast.walk(target):
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                        changing.add(name)
            if (
                isinstance(sub, ast.Call)
                and isinstance(sub.func, ast.Attribute)
                and sub.func.attr
                in {"_move", "_detach", "_attach", "_set_profile", "_hold_bundle", "add", "discard", "notify"}
            ):
                changing.add(name)
    grew = True
    while grew:
        grew = False
        for name, node in methods.items():
            if name in changing:
                continue
            for sub in ast.walk(node):
                if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr in changing:
                    changing.add(name)
                    grew = True
                    break
    return {name for name in changing if not name.startswith("_")}


def _receiver(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def device_callers() -> Counter[str]:
    """Calls of the device's changing methods, per engine module outside the device's own."""
    changing = changing_methods()
    calls: Counter[str] = Counter()
    for name, path in engine_modules().items():
        if DEVICE_MODULE.match(name):
            continue
        for node in ast.walk(_tree(path)):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in changing
                and "device" in _receiver(node.func.value)
            ):
                calls[name] += 1
    return calls


def scheduler_notifications() -> Counter[str]:
    """Calls that tell the scheduler (or its admission) something changed, per module, outside those two."""
    calls: Counter[str] = Counter()
    for name, path in engine_modules().items():
        if name in {"admission.gate", "admission.scheduler", "admission", "scheduler", "_admission", "_scheduler"}:
            continue
        for node in ast.walk(_tree(path)):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in SCHEDULER_EVENTS
                and any(word in _receiver(node.func.value) for word in ("admission", "scheduler"))
            ):
                calls[name] += 1
    return calls


# -- facts stated twice ------------------------------------------------------------------------------------------


def _count(pattern: str, *, besides: str = "") -> int:
    regex = re.compile(pattern)
    return sum(
        len(regex.findall(path.read_text(encoding="utf-8")))
        for name, path in engine_modules().items()
        if name != besides
    )


def _modules_with(pattern: str) -> int:
    regex = re.compile(pattern)
    return sum(1 for path in engine_modules().values() if regex.search(path.read_text(encoding="utf-8")))


def facts() -> dict[str, int]:
    """How many places state each fact (1 is the target)."""
    return {
        "closed (modules keeping a _closed flag)": _modules_with(r"self\._closed\s*=|^\s+_closed: bool"),
        "model list (device slots + other _models copies)": 1 + _count(r"self\._models(:[^=]+)?\s*=\s*[{d]"),
        "last use (fields)": sum(
            1 for pattern in (r"_last_active\b", r"last_busy_at\b", r"_active_since\b") if _modules_with(pattern)
        ),
        "restart bookkeeping (modules)": _modules_with(r"self\._dead\b|self\._restarts\b"),
        # The simulator builds the policy of its own scheduler (``DRIVERS_ALLOWED`` in test_engine_room.py says why).
        "SchedulerPolicy built": _count(r"SchedulerPolicy\.from_switching\(|SchedulerPolicy\(", besides=SIMULATOR),
        # SchedulerPolicy itself turns the profile's string into ``policy.auto``: the one place that may compare it.
        "mode compared as a string": _count(r"mode\s*[!=]=\s*[\"']", besides="admission.scheduling_types"),
        "hold timeout drain_timeout + 60": _count(r"drain_timeout\s*\+\s*(?:60|HOLD_MARGIN_S)"),
        "'removes the active model' refusal": _count(r"removes the active model '"),
    }


# -- one manual switch, traced ------------------------------------------------------------------------------------


def switch_modules() -> list[str]:
    """The engine modules with a function called while one manual switch (a -> b, keep, fake engines) runs."""
    from server.engine import EngineManager
    from server.engine.strategies import KeepStrategy
    from tests.fakes.engines import FakeBundleBuilder, FakeLoader, fake_models

    seen: set[str] = set()
    prefix = str(ENGINE)

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            filename = frame.f_code.co_filename
            if filename.startswith(prefix):
                seen.add(str(Path(filename).relative_to(ENGINE)))

    async def run() -> None:
        manager: Any = EngineManager(
            fake_models("a", "b"), KeepStrategy(FakeLoader()), FakeBundleBuilder(), memory_probe=lambda: 0.0
        )
        await manager.initialize("a")
        sys.setprofile(profile)
        try:
            await manager.switch("b")
        finally:
            sys.setprofile(None)
        await manager.shutdown()

    asyncio.run(run())
    return sorted(seen)


def main() -> None:
    count, lines = modules_and_lines()
    print(f"modules in server/engine: {count} ({lines} lines)")
    traced = switch_modules()
    print(f"modules one manual switch passes through: {len(traced)}: {', '.join(traced)}")
    callers = device_callers()
    print(f"callers of the device's changing methods: {sum(callers.values())}: {dict(sorted(callers.items()))}")
    print(f"  (changing methods: {', '.join(sorted(changing_methods()))})")
    notes = scheduler_notifications()
    print(f"places that notify the scheduler: {sum(notes.values())}: {dict(sorted(notes.items()))}")
    circles = import_circles()
    print(f"import circles in server/engine: {len(circles)}: {circles}")
    stated = facts()
    print(f"facts stated twice: {sum(1 for n in stated.values() if n > 1)} of {len(stated)}")
    for fact, places in stated.items():
        print(f"  {fact}: {places}")


if __name__ == "__main__":
    main()
