"""Typed errors raised by the engine manager.

Each error knows the HTTP status and OpenAI error ``code`` it maps to, so the API layer converts them in one place
without knowing every case. The manager itself never imports Litestar.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = [
    "AdmissionTimeout",
    "ConcurrencyLimit",
    "EngineDied",
    "EngineError",
    "LoadFailed",
    "ManagerClosed",
    "ModelLoadFailed",
    "ModelNotActive",
    "ModelNotFound",
    "ModelSwitching",
    "NoActiveModel",
    "QueueFull",
    "ReloadFailed",
    "ReloadRefused",
    "RequestAbortedBySwitch",
    "RequestAbortedByUnload",
    "ResidencyRefused",
    "SwitchConflict",
    "SwitchFailed",
]


class EngineError(Exception):
    """Base of the manager's errors.

    Attributes:
        status_code: The HTTP status that fits the error.
        code: The OpenAI-style error code.
        retry_after: Seconds a client should wait before retrying (sent as ``Retry-After`` with 503s).
    """

    status_code: int = 500
    code: str = "engine_error"
    retry_after: int | None = None

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def details(self) -> dict[str, Any]:
        """Fields the error object carries besides OpenAI's four (none by default)."""
        return {}


class ModelNotFound(EngineError):
    """The requested model is not in the profile."""

    status_code = 404
    code = "model_not_found"

    def __init__(self, model: str, available: Iterable[str]) -> None:
        names = ", ".join(sorted(available))
        super().__init__(f"The model '{model}' does not exist. Configured models: {names}.")
        self.model = model


class ModelNotActive(EngineError):
    """Manual mode: the requested model is configured but another one holds the device."""

    status_code = 409
    code = "model_not_active"

    def __init__(self, model: str, active: str) -> None:
        super().__init__(
            f"The model '{model}' is configured but not active; the active model is '{active}'. "
            f"Switch with POST /v1/models/switch (admin) or request '{active}'."
        )
        self.model = model
        self.active = active


class ModelSwitching(EngineError):
    """Manual mode: a switch is under way, and the requested model is not its target."""

    status_code = 503
    code = "model_switching"
    retry_after = 5

    def __init__(self, model: str, source: str | None, target: str) -> None:
        under_way = f"from '{source}' to '{target}'" if source else f"to '{target}'"
        if model == source:
            tail = f"'{model}' takes no new requests."
        else:
            tail = f"'{model}' is not active; retry when the switch has ended."
        super().__init__(f"The server is switching {under_way}; {tail}")
        self.model = model
        self.source = source
        self.target = target


class AdmissionTimeout(EngineError):
    """A request waited for its model longer than its bound."""

    status_code = 503
    code = "switch_in_progress"
    retry_after = 5

    def __init__(self, model: str | None, waited_s: float, retry_after: int | None = None) -> None:
        what = f"model '{model}'" if model else "the active model"
        super().__init__(f"Timed out after {waited_s:.1f}s waiting for {what} to become active.")
        self.model = model
        if retry_after is not None:
            self.retry_after = retry_after


class QueueFull(EngineError):
    """Too many requests already wait for this model (`switching.max_queue`)."""

    status_code = 503
    code = "queue_full"
    retry_after = 5

    def __init__(self, model: str, limit: int, retry_after: int) -> None:
        super().__init__(f"{limit} requests already wait for the model '{model}'; retry later.")
        self.model = model
        self.retry_after = retry_after


class NoActiveModel(EngineError):
    """No model holds the device (start-up, or a switch and its rollback both failed)."""

    status_code = 503
    code = "no_active_model"
    retry_after = 10


class ManagerClosed(EngineError):
    """The server is shutting down."""

    status_code = 503
    code = "server_shutting_down"
    retry_after = 10

    def __init__(self) -> None:
        super().__init__("The server is shutting down.")


class ModelLoadFailed(EngineError):
    """A model failed to load. Clients get a generic message; the reason goes to the log and ``/admin/status``."""

    status_code = 503
    code = "model_load_failed"
    retry_after = 30

    def __init__(self, model: str, reason: str, retry_after: int | None = None) -> None:
        if retry_after is not None:
            self.retry_after = retry_after
        super().__init__(
            f"The model '{model}' failed to load; it is not tried again for {self.retry_after} s. "
            "Administrators find the reason in the server log and GET /admin/status."
        )
        self.model = model
        self.reason = reason


class SwitchConflict(EngineError):
    """A switch to another target is already under way."""

    status_code = 409
    code = "switch_conflict"

    def __init__(self, requested: str, in_progress: str) -> None:
        super().__init__(
            f"Cannot switch to '{requested}': a switch to '{in_progress}' is under way. Retry when it ends."
        )
        self.requested = requested
        self.in_progress = in_progress


class SwitchFailed(EngineError):
    """The target failed to activate; the previous model was restored when possible.

    A rollback that restored the previous model leaves a server that serves: that answers 503 with
    ``rolled_back: true`` and ``Retry-After``, so monitoring sees a refused request, not a broken server. Without a
    restored model it is a 500: nothing serves until an admin acts.
    """

    code = "switch_failed"

    def __init__(self, target: str, reason: str, restored: str | None) -> None:
        tail = f"'{restored}' was restored and keeps serving." if restored else "No model is active now."
        super().__init__(f"Switching to '{target}' failed: {reason}. {tail}")
        self.target = target
        self.reason = reason
        self.restored = restored
        self.status_code = 503 if restored else 500
        self.retry_after = 5 if restored else None

    def details(self) -> dict[str, Any]:
        return {"rolled_back": self.restored is not None, "restored_model": self.restored}


class EngineDied(EngineError):
    """The engine a request was leased to died or hung (noticed by its watch); the request was ended.

    Clients get a generic message; the cause (``engine died: killed by signal 9 (SIGKILL)``) goes to the log and
    ``/admin/status``.
    """

    status_code = 503
    code = "engine_died"
    retry_after = 5

    def __init__(self, model: str, cause: str) -> None:
        super().__init__(
            f"The engine of the model '{model}' stopped working and the request was ended. Retry the request; "
            "administrators find the cause in the server log and GET /admin/status."
        )
        self.model = model
        self.cause = cause


class RequestAbortedBySwitch(EngineError):
    """An in-flight request outlived the drain timeout of a switch and was aborted."""

    status_code = 503
    code = "model_switched"
    retry_after = 1

    def __init__(self, model: str, target: str) -> None:
        super().__init__(
            f"The request was aborted because the server switched from '{model}' to '{target}' "
            f"and the drain timeout ran out. Retry the request."
        )
        self.model = model
        self.target = target


class ReloadRefused(EngineError):
    """A reload cannot be applied in the manager's current state; nothing changed."""

    status_code = 409
    code = "reload_refused"


class ReloadFailed(EngineError):
    """The active model's new frontend could not be built over its engine; nothing changed."""

    status_code = 422
    code = "reload_failed"

    def __init__(self, model: str, reason: str) -> None:
        super().__init__(
            f"The new frontend of the active model '{model}' could not be built: {reason}. Nothing changed."
        )
        self.model = model
        self.reason = reason


class ConcurrencyLimit(EngineError):
    """A model serves its ``max_concurrent_requests`` and its queue is full: the client should slow down."""

    status_code = 429
    code = "too_many_requests"
    retry_after = 1

    def __init__(self, model: str, limit: int, queued: int, retry_after: int | None = None) -> None:
        super().__init__(
            f"The model '{model}' serves its limit of {limit} concurrent requests and {queued} more wait; retry later."
        )
        self.model = model
        if retry_after is not None:
            self.retry_after = retry_after


class RequestAbortedByUnload(EngineError):
    """An in-flight request outlived the drain timeout of a forced unload of its model and was aborted."""

    status_code = 503
    code = "model_unloaded"
    retry_after = 1

    def __init__(self, model: str) -> None:
        super().__init__(
            f"The request was aborted because the model '{model}' was unloaded and the drain timeout ran out. "
            "Retry the request."
        )
        self.model = model


class ResidencyRefused(EngineError):
    """A load or unload cannot be done now or under this strategy (the message says why); nothing changed."""

    status_code = 409
    code = "residency_refused"


class LoadFailed(EngineError):
    """An admin load (or a preload) could not start the model's engine; the slot shows the reason too."""

    status_code = 500
    code = "load_failed"

    def __init__(self, model: str, reason: str) -> None:
        super().__init__(f"Loading '{model}' failed: {reason}. The active model keeps serving.")
        self.model = model
        self.reason = reason
