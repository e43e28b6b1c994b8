"""What bringing each model back costs, measured: the cost book the residency policy weighs evictions with.

Each switch that brought a model up reports where its time went (:class:`SwitchReport`); the book keeps, per model and
per path, how long that took without the drain (the drain is the model being left's, not the target's):

* ``in_place``: the engine processes stayed and the model was swapped inside them (``method`` ``weights`` or
  ``reconfigure``);
* ``cold``: a fresh engine was started for it (the report carries an ``engine_start``);
* ``warm``: anything else that brought it up without an engine start (a parked ``keep`` engine, a wake-up, a stash
  restore).

It sits low in the engine (the shared types) so that the residency policy reads it without importing the admission
or the switching. The book is saved as ``reload-costs.json`` in the server's private state folder (written by its
owner, 0600) after each measurement, so that a restart keeps what it learned; ``GET /admin/costs`` serves
:meth:`CostBook.document`. Its JSON Schema (:func:`costs_schema`) is in ``docs/residency.md``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Final, Literal, Protocol

import msgspec

from server.engine.types.report import SwitchReport

__all__ = [
    "COSTS_FILE",
    "CostBook",
    "CostStore",
    "CostsDocument",
    "ModelCosts",
    "PathCost",
    "ReloadPath",
    "costs_schema",
    "reload_path",
]

logger = logging.getLogger("turnout.engine.costs")

#: The book's file in the private state folder.
COSTS_FILE: Final = "reload-costs.json"
#: The newest measurements weigh as if only this many were kept: a model's costs follow a changed machine.
_WINDOW: Final = 8

ReloadPath = Literal["in_place", "warm", "cold"]
_PATHS: Final[tuple[ReloadPath, ...]] = ("in_place", "warm", "cold")


class PathCost(msgspec.Struct, frozen=True, kw_only=True):
    """What one path of bringing a model up cost.

    Attributes:
        count: Measurements taken.
        mean_s: Their running mean in seconds (the newest eight weigh most), drain excluded.
        last_s: The newest one.
        phases_ms: The running means of the phases the reports named, in ms: ``unload``, ``load``, ``kv_cache``,
            ``frontend`` (in place), ``engine_start`` and its phases (``weights``, ``kv_cache``, ``compile``, ...)
            prefixed ``start.``.
        provisional: Only switches that paid one-offs a reload does not measured it (a server's start-up switch:
            first imports and warm-ups; a checkpoint's first proof: its digests and first fingerprint), so it stands
            only until the next measurement of the path replaces it, and never dilutes one that a reload measured.
    """

    count: int
    mean_s: float
    last_s: float
    phases_ms: dict[str, float] = msgspec.field(default_factory=dict)
    provisional: bool = False


class ModelCosts(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One model's measured paths (a path never measured is absent)."""

    in_place: PathCost | None = None
    warm: PathCost | None = None
    cold: PathCost | None = None

    def path(self, name: ReloadPath) -> PathCost | None:
        """The cost of path ``name``, if measured."""
        cost: PathCost | None = getattr(self, name)
        return cost


class CostsDocument(msgspec.Struct, frozen=True, kw_only=True):
    """The cost book as ``GET /admin/costs`` serves it and ``reload-costs.json`` keeps it.

    Attributes:
        version: The document's version (1).
        models: Model name to its measured paths.
    """

    version: int = 1
    models: dict[str, ModelCosts] = msgspec.field(default_factory=dict)


class CostStore(Protocol):
    """Where the book is kept (the server's :class:`StateDir`)."""

    def write_private(self, name: str, text: str) -> object: ...

    def read_private(self, name: str) -> str | None: ...


def reload_path(report: SwitchReport) -> ReloadPath:
    """The path by which ``report``'s target came up."""
    if report.method in ("weights", "reconfigure"):
        return "in_place"
    return "cold" if report.engine_start is not None else "warm"


def _phases(report: SwitchReport) -> dict[str, float]:
    named = {"unload": report.unload_ms, "load": report.load_ms, "kv_cache": report.kv_cache_ms}
    named["frontend"] = report.frontend_ms
    phases = {name: float(ms) for name, ms in named.items() if ms is not None}
    start = report.engine_start
    if start is not None:
        phases["engine_start"] = float(start.total_ms)
        phases.update({f"start.{name}": float(ms) for name, ms in start.phases_ms.items()})
    return phases


def _blend(known: float, measured: float, count: int) -> float:
    """The running mean after the ``count``-th measurement (a plain mean up to the window, then a moving one)."""
    return known + (measured - known) / min(count, _WINDOW)


class CostBook:
    """Per model and path, what bringing a model up cost (see the module's docstring).

    Args:
        store: Where the book is loaded from and saved after each measurement (None: memory only).
    """

    def __init__(self, store: CostStore | None = None) -> None:
        self._store = store
        self._paths: dict[str, dict[ReloadPath, PathCost]] = {}
        if store is not None:
            self._load(store)

    def record(self, report: SwitchReport, *, at_startup: bool = False) -> None:
        """Count the switch that ``report`` describes (a switch that changed nothing is not a reload), less its
        drain and a wait for the engine launcher's first warm-up (a one-off of the server's first start). The
        measurement is provisional (see :class:`PathCost`) for the server's start-up switch (``at_startup``) and for
        one whose proof recorded its checkpoint's first fingerprint."""
        if not report.switched:
            return
        waited_ms = report.engine_start.waited_ms if report.engine_start is not None else 0
        seconds = max(0.0, (report.duration_ms - report.drain_ms - waited_ms) / 1000.0)
        provisional = at_startup or (report.verify is not None and report.verify.recorded_first)
        self.add(report.current_model, reload_path(report), seconds, _phases(report), provisional=provisional)

    def add(
        self,
        model: str,
        path: ReloadPath,
        seconds: float,
        phases: Mapping[str, float] | None = None,
        *,
        provisional: bool = False,
    ) -> None:
        """Count one measurement of ``model`` coming up by ``path`` in ``seconds``, and save the book.
        A ``provisional`` one (a start-up switch's) never dilutes a reload's, and the next reload replaces it."""
        paths = self._paths.setdefault(model, {})
        known = paths.get(path)
        phases = dict(phases or {})
        if known is not None and provisional and not known.provisional:
            return
        if known is None or (known.provisional and not provisional):
            paths[path] = PathCost(count=1, mean_s=seconds, last_s=seconds, phases_ms=phases, provisional=provisional)
        else:
            count = known.count + 1
            blended = {
                name: _blend(known.phases_ms[name], ms, count) if name in known.phases_ms else ms
                for name, ms in phases.items()
            }
            paths[path] = PathCost(
                count=count,
                mean_s=_blend(known.mean_s, seconds, count),
                last_s=seconds,
                phases_ms=blended,
                provisional=provisional,
            )
        self._save()

    def seconds(self, model: str, path: ReloadPath) -> float | None:
        """The measured mean of ``model`` coming up by ``path`` (None: never measured)."""
        cost = self._paths.get(model, {}).get(path)
        return cost.mean_s if cost is not None else None

    def return_s(self, model: str) -> float | None:
        """What ``model`` costs to come back once its engine is gone: its cold start, else its in-place swap (what
        the device does instead where it can), else its warm path; None: never measured."""
        for path in ("cold", "in_place", "warm"):
            seconds = self.seconds(model, path)
            if seconds is not None:
                return seconds
        return None

    def document(self) -> CostsDocument:
        """The book as ``GET /admin/costs`` serves it."""
        models = {name: ModelCosts(**paths) for name, paths in self._paths.items()}
        return CostsDocument(models=models)

    @classmethod
    def from_document(cls, document: CostsDocument) -> CostBook:
        """A book (kept in memory) holding ``document``'s costs: the simulator's, from a file or a server."""
        book = cls()
        book._fill(document)
        return book

    def _fill(self, document: CostsDocument) -> None:
        for name, costs in document.models.items():
            paths = {path: cost for path in _PATHS if (cost := costs.path(path)) is not None}
            if paths:
                self._paths[name] = paths

    def _load(self, store: CostStore) -> None:
        try:
            text = store.read_private(COSTS_FILE)
            if text is not None:
                self._fill(msgspec.json.decode(text, type=CostsDocument))
        except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
            logger.warning("the saved reload costs are not used (%s); they are measured again", exc)

    def _save(self) -> None:
        if self._store is None:
            return
        try:
            self._store.write_private(COSTS_FILE, msgspec.json.encode(self.document()).decode())
        except OSError as exc:  # the measurement stays in memory; a full or changed folder must not fail a switch
            logger.warning("the reload costs could not be saved (%s)", exc)


def costs_schema() -> dict[str, object]:
    """The JSON Schema of ``GET /admin/costs`` (and of ``reload-costs.json``)."""
    schema: dict[str, object] = msgspec.json.schema(CostsDocument)
    return schema
