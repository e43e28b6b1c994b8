"""The memory plan's types: what was read of the device's memory, what a model's config says about its memory, and
the KV cache each model gets (``residency/kv_budget.py`` decides it; the start-up log, ``/admin/status`` and the
strategies read it).
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec

from server.profiles.footprint import kv_cache_need_bytes

__all__ = ["DecisionSource", "KvDecision", "MemoryBudgetExceeded", "MemoryPlan", "MemoryReading", "ModelShape"]

_MIB: Final = 2**20

DecisionSource = Literal["budget", "profile"]


class MemoryReading(msgspec.Struct, frozen=True, kw_only=True):
    """The memory vLLM will check when an engine starts.

    Attributes:
        device: ``cpu`` or ``cuda``.
        where: What was read, for people (``NUMA node 0``, ``cuda:0``).
        total_bytes: Its size.
        available_bytes: What is free now, as vLLM counts it.
    """

    device: str
    where: str
    total_bytes: int
    available_bytes: int


class ModelShape(msgspec.Struct, frozen=True, kw_only=True):
    """What one model's resolved engine config says about its memory.

    Attributes:
        name: The model's name in the profile.
        kv_bytes_per_token: KV-cache bytes one token takes in all layers.
        max_model_len: The longest sequence (resolved by vLLM when the profile leaves it out).
        max_num_seqs: The most sequences scheduled at once (resolved likewise).
        block_size: Tokens per KV-cache block: a sequence takes whole blocks.
        weight_bytes: The model's weights as they will sit in memory.
        explicit_kv_bytes: The KV cache the profile fixed itself (``kv_cache_memory_bytes``), if any.
        explicit_fraction: The ``gpu_memory_utilization`` the profile fixed itself, if any.
    """

    name: str
    kv_bytes_per_token: int
    max_model_len: int
    max_num_seqs: int
    block_size: int
    weight_bytes: int
    explicit_kv_bytes: int | None = None
    explicit_fraction: float | None = None

    @property
    def budgeted(self) -> bool:
        """Whether Turnout sizes this model's KV cache (the profile fixed neither figure)."""
        return self.explicit_kv_bytes is None and self.explicit_fraction is None

    @property
    def one_sequence_bytes(self) -> int:
        """The least KV cache vLLM accepts: one sequence of ``max_model_len``, in whole blocks."""
        return kv_cache_need_bytes(
            per_token=self.kv_bytes_per_token,
            max_model_len=self.max_model_len,
            max_num_seqs=1,
            block_size=self.block_size,
        )

    @property
    def full_bytes(self) -> int:
        """The most KV cache the model can use: ``max_num_seqs`` sequences of ``max_model_len``."""
        return self.one_sequence_bytes * self.max_num_seqs


class KvDecision(msgspec.Struct, frozen=True, kw_only=True):
    """The KV cache one model gets.

    Attributes:
        model: The model's name.
        source: ``budget`` (Turnout sized it) or ``profile`` (the profile fixed it; Turnout only counts it).
        kv_cache_bytes: The KV cache size (for ``profile`` with ``gpu_memory_utilization``: an estimate).
        footprint_bytes: What the model takes when resident: engine, weights and KV cache.
        need_bytes: ``max_model_len`` x ``max_num_seqs`` tokens' worth, the most it could use.
        min_bytes: One sequence of ``max_model_len``, the least vLLM accepts.
        sequences: How many full-length sequences the KV cache holds.
        capped_at_need: Whether the size was limited by ``need_bytes`` rather than by memory.
    """

    model: str
    source: DecisionSource
    kv_cache_bytes: int
    footprint_bytes: int
    need_bytes: int
    min_bytes: int
    sequences: float
    capped_at_need: bool


class MemoryPlan(msgspec.Struct, frozen=True, kw_only=True):
    """The whole decision, as printed at start-up and shown by ``/admin/status``.

    Attributes:
        memory: What was read, and when (start-up).
        reserve_bytes: Left out of the pool for everything else.
        engine_overhead_bytes: The fixed cost counted per engine besides its weights and KV cache.
        resident_together: How many models may be held at once under the switching strategy.
        strategy: The strategy that decided ``resident_together``.
        decisions: One per model, in profile order.
        budget_bytes: The memory budget residency spends (``keep``), each model's KV cache sized for it alone;
            None: one model at a time, the pool water-filled.
        errors: Models that cannot fit (empty when the plan holds).
    """

    memory: MemoryReading
    reserve_bytes: int
    engine_overhead_bytes: int
    resident_together: int
    strategy: str
    decisions: list[KvDecision]
    budget_bytes: int | None = None
    errors: list[str] = msgspec.field(default_factory=list)

    def footprints(self) -> dict[str, int]:
        """Each model's footprint by name."""
        return {item.model: item.footprint_bytes for item in self.decisions}

    def summary(self) -> list[str]:
        """The decision as lines for the start-up log."""
        together = (
            f"resident by memory budget {_mib(self.budget_bytes)}"
            if self.budget_bytes is not None
            else f"up to {self.resident_together} model(s) resident together"
        )
        head = (
            f"memory: {_mib(self.memory.available_bytes)} available of {_mib(self.memory.total_bytes)} "
            f"on {self.memory.where}; reserve {_mib(self.reserve_bytes)}, {_mib(self.engine_overhead_bytes)} "
            f"per engine; {together} (strategy {self.strategy})"
        )
        lines = [head]
        for item in self.decisions:
            how = "set by the profile" if item.source == "profile" else "budgeted"
            cap = ", capped at max_model_len x max_num_seqs" if item.capped_at_need else ""
            lines.append(
                f"  {item.model}: KV cache {_mib(item.kv_cache_bytes)} ({how}{cap}; "
                f"{item.sequences:.1f} full-length sequences; footprint {_mib(item.footprint_bytes)})"
            )
        lines.extend(f"  error: {error}" for error in self.errors)
        return lines


class MemoryBudgetExceeded(ValueError):
    """A model cannot hold one sequence of its ``max_model_len``; ``plan`` has every figure, ``problems`` the lines."""

    def __init__(self, plan: MemoryPlan) -> None:
        super().__init__("; ".join(plan.errors))
        self.plan = plan
        self.problems = list(plan.errors)


def _mib(size: int) -> str:
    return f"{size / _MIB:,.0f} MiB" if size >= 10 * _MIB else f"{size / _MIB:.1f} MiB"
