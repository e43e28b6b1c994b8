"""A request's lease has one owner: the admitted request, whose holders hand it on and the last one ends it."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from server.api.admission.request_admission import AdmittedRequest, Holder

API = Path(__file__).resolve().parents[2] / "server" / "api"


class _Manager:
    def __init__(self) -> None:
        self.released: list[Any] = []

    def release(self, lease: Any) -> None:
        self.released.append(lease)


def _admitted() -> tuple[AdmittedRequest, _Manager]:
    manager = _Manager()
    return AdmittedRequest(manager=manager, lease=object(), body={}), manager  # type: ignore[arg-type]


def test_the_route_ends_a_lease_it_kept_once() -> None:
    admitted, manager = _admitted()
    admitted.let_go(Holder.STREAM)  # no stream holds it: nothing happens
    assert manager.released == []
    admitted.let_go(Holder.ROUTE)
    admitted.let_go(Holder.ROUTE)
    assert manager.released == [admitted.lease]


def test_a_stream_takes_the_lease_from_the_route_until_its_last_event() -> None:
    admitted, manager = _admitted()
    admitted.hand_to_stream()
    assert admitted.streamed
    admitted.let_go(Holder.ROUTE)  # the route's clean-up runs before the body is sent
    assert manager.released == []
    admitted.let_go(Holder.STREAM)
    assert manager.released == [admitted.lease]


def test_a_background_response_holds_the_lease_past_the_route_and_the_stream() -> None:
    admitted, manager = _admitted()
    admitted.hold_for(Holder.BACKGROUND)
    admitted.hand_to_stream()
    admitted.let_go(Holder.ROUTE)
    admitted.let_go(Holder.STREAM)
    assert manager.released == []
    admitted.let_go(Holder.BACKGROUND)
    assert manager.released == [admitted.lease]


def test_a_response_that_ends_before_its_route_leaves_the_lease_to_the_route() -> None:
    admitted, manager = _admitted()
    admitted.hold_for(Holder.BACKGROUND)
    admitted.let_go(Holder.BACKGROUND)
    assert manager.released == []
    admitted.let_go(Holder.ROUTE)
    admitted.hold_for(Holder.BACKGROUND)  # an ended lease is never revived
    admitted.let_go(Holder.BACKGROUND)
    assert manager.released == [admitted.lease]


def test_only_the_admitted_request_ends_a_lease_in_the_api() -> None:
    def releases(path: Path) -> list[str]:
        return [
            f"{path.name}:{node.lineno}"
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "release"
        ]

    found = [hit for path in sorted(API.rglob("*.py")) for hit in releases(path)]
    assert len(found) == 1 and found[0].startswith("request_admission.py:"), found
