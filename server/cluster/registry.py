"""The cluster's registry: one small Ray actor that every node replica reports its state to and takes admin
commands from.

Ray Serve routes a handle call to *some* replica; the cluster view needs *every* replica, and the admin switch
*one named* replica. So each node runs a loop (``NodeLoop`` in node.py) that reports its state about once a second
and long-polls its own inbox here; the ingress reads the reports (stale ones are left out: a killed replica stops
reporting, its restart reports under a new id) and posts commands that the named replica answers.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import defaultdict
from typing import Any

import ray

__all__ = ["NAMESPACE", "REGISTRY_NAME", "ClusterRegistry", "registry_handle"]

#: The registry is a named actor in its own namespace, so the ingress and the nodes find it whatever theirs is.
REGISTRY_NAME = "turnout-cluster-registry"
NAMESPACE = "turnout"


class ClusterRegistry:
    """Replica reports and command inboxes (an async Ray actor: its methods interleave on one event loop)."""

    def __init__(self) -> None:
        self._reports: dict[str, tuple[float, dict[str, Any]]] = {}
        self._inboxes: defaultdict[str, asyncio.Queue[dict[str, Any]]] = defaultdict(asyncio.Queue)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._ids = itertools.count(1)

    async def report(self, replica: str, state: dict[str, Any]) -> None:
        """``replica``'s current state (its models, what Ray's multiplexer holds, its counters)."""
        self._reports[replica] = (time.monotonic(), state)

    async def forget(self, replica: str) -> None:
        """``replica`` stopped cleanly: leave it out of the view at once."""
        self._reports.pop(replica, None)
        self._inboxes.pop(replica, None)

    async def view(self, max_age_s: float) -> dict[str, dict[str, Any]]:
        """Every replica that reported within ``max_age_s`` seconds, by replica id."""
        now = time.monotonic()
        return {replica: state for replica, (at, state) in self._reports.items() if now - at <= max_age_s}

    async def command(self, replica: str, operation: str, args: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """Run ``operation`` on ``replica`` and return its answer (``{"status": ..., "body": ...}``).

        Raises:
            TimeoutError: the replica did not answer in ``timeout_s`` seconds (it may be gone).
        """
        command_id = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[command_id] = future
        await self._inboxes[replica].put({"id": command_id, "operation": operation, "args": args})
        try:
            return await asyncio.wait_for(future, timeout_s)
        finally:
            self._pending.pop(command_id, None)

    async def next_command(self, replica: str, timeout_s: float) -> dict[str, Any] | None:
        """The next command for ``replica``, or None after ``timeout_s`` seconds without one."""
        try:
            return await asyncio.wait_for(self._inboxes[replica].get(), timeout_s)
        except TimeoutError:
            return None

    async def complete(self, command_id: int, answer: dict[str, Any]) -> None:
        """A replica's answer to a command (ignored when its caller stopped waiting)."""
        future = self._pending.get(command_id)
        if future is not None and not future.done():
            future.set_result(answer)


def registry_handle(app: str) -> Any:
    """Application ``app``'s registry actor, created by whichever of the ingress and the nodes asks first (one
    per application, so that two Turnout applications on one cluster keep apart).

    Detached, so that it outlives a replica's restart; ``num_cpus=0``: it must not take a CPU from the replicas.
    """
    actor = ray.remote(num_cpus=0, max_restarts=-1)(ClusterRegistry)
    return actor.options(
        name=f"{REGISTRY_NAME}:{app}", namespace=NAMESPACE, lifetime="detached", get_if_exists=True
    ).remote()
