"""The cluster's own errors, in Turnout's error type (so that they leave in the API's shape)."""

from __future__ import annotations

from server.engine import EngineError

__all__ = ["ReplicaLost", "ReplicaUnknown", "ReplicasBusy"]


class ReplicaLost(EngineError):
    """The replica serving a request died (Ray restarts it): retry, and another or the restarted replica answers."""

    status_code = 503
    code = "replica_lost"
    retry_after = 1

    def __init__(self) -> None:
        super().__init__("The replica serving this request stopped; retry the request (the cluster restarts it).")


class ReplicaUnknown(EngineError):
    """The admin switch named a replica that is not in the cluster view (or did not answer)."""

    status_code = 404
    code = "replica_not_found"

    def __init__(self, replica: str) -> None:
        super().__init__(f"No live replica '{replica}'; GET /admin/status lists them.")
        self.replica = replica


class ReplicasBusy(EngineError):
    """Every replica is at its ``max_ongoing_requests`` and the ingress's queue for them is full
    (``max_queued_requests``): refused at once, as one node refuses past ``switching.max_queue``."""

    status_code = 503
    code = "queue_full"
    retry_after = 1

    def __init__(self, limit: int | None = None) -> None:
        waiting = f"{limit} requests already wait for one" if limit is not None else "the queue for them is full"
        super().__init__(f"Every replica is busy and {waiting}; retry later.")
        self.limit = limit
