"""Fixtures for the manager's unit tests: fake engines, a fake bundle builder, a manager factory."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from server.engine import EngineManager
from server.engine.strategies import KeepStrategy, StopStrategy
from server.engine.types.strategy import SwitchStrategy
from tests.fakes.engines import FakeBundleBuilder, FakeLoader, fake_models

MakeManager = Callable[..., EngineManager[Any]]


@pytest.fixture
def loader() -> FakeLoader:
    return FakeLoader()


@pytest.fixture
def builder() -> FakeBundleBuilder:
    return FakeBundleBuilder()


@pytest.fixture
async def make_manager(loader: FakeLoader, builder: FakeBundleBuilder) -> AsyncIterator[MakeManager]:
    made: list[EngineManager[Any]] = []

    def make(strategy: str | SwitchStrategy = "keep", **kwargs: Any) -> EngineManager[Any]:
        if isinstance(strategy, str):
            strategy = KeepStrategy(loader) if strategy == "keep" else StopStrategy(loader)
        kwargs.setdefault("memory_probe", lambda: 100.0)
        kwargs.setdefault("abort_grace", 0.2)
        models = kwargs.pop("models", None) or fake_models("a", "b", "c")
        manager: EngineManager[Any] = EngineManager(models, strategy, builder, **kwargs)
        made.append(manager)
        return manager

    yield make
    for manager in made:
        await manager.shutdown()
