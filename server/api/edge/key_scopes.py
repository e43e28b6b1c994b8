"""API keys limited to some models (``server.api_keys``): which models the request's key may use.

The guard (``auth.py``) matches the key and records its scope on the connection; every route that names a model
asks :func:`allowed_model` before the manager sees the name. A model outside the scope is answered exactly as a
name no model has (the same 404 ``model_not_found``, listing only the key's models, on the same code path), so a
key cannot tell a hidden model from a missing one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from litestar.connection import ASGIConnection

from server.api.settings import ScopedKey
from server.engine import EngineError, ModelNotFound
from server.profiles import ApiKeyScope, ModelProfile

__all__ = [
    "KeyNotSet",
    "NoModelForKey",
    "allowed_model",
    "hidden_names",
    "record_holder",
    "record_scope",
    "request_holder",
    "request_scope",
    "scoped_keys",
    "shown_to",
    "visible",
]

#: The connection state key the guard records the key's models under (absent: every model).
_STATE_KEY: Final = "turnout_model_scope"
#: The connection state key the guard records the key's identity under (absent: a server without keys).
_HOLDER_KEY: Final = "turnout_key_holder"


class KeyNotSet(ValueError):
    """A ``server.api_keys`` item names an environment variable that is not set (the server must not start)."""


class NoModelForKey(EngineError):
    """A request that names no model, while the active model is not one its key may use."""

    status_code = 404
    code = "model_not_found"

    def __init__(self, available: Iterable[str]) -> None:
        names = ", ".join(sorted(available))
        super().__init__(f"The request names no model; name one of the models this API key may use: {names}.")


def scoped_keys(
    items: Sequence[ApiKeyScope], models: Mapping[str, ModelProfile], env: Mapping[str, str]
) -> tuple[ScopedKey, ...]:
    """Each item's key read from ``env``, with its names (models or aliases) resolved to the models they name.

    Raises:
        KeyNotSet: An item's env var is unset or empty; the message names the item and the variable.
    """
    owners = {name: name for name in models}
    for name, model in models.items():
        for alias in model.aliases:
            owners.setdefault(alias, name)
    keys = []
    for index, item in enumerate(items):
        secret = env.get(item.key_env)
        if not secret:
            raise KeyNotSet(
                f"server.api_keys[{index}].key_env: the environment variable {item.key_env} is not set; "
                "set it to the key, or remove the item"
            )
        models_of_key = frozenset(owners[name] for name in item.models)
        keys.append(ScopedKey(key=secret, models=models_of_key, cache_group=item.cache_group))
    return tuple(keys)


def record_scope(connection: ASGIConnection[Any, Any, Any, Any], models: frozenset[str] | None) -> None:
    """Note the models the connection's key may use (None: every model)."""
    connection.state[_STATE_KEY] = models


def request_scope(connection: ASGIConnection[Any, Any, Any, Any]) -> frozenset[str] | None:
    """The models the connection's key may use; None (every model) when no limited key was used."""
    scope: frozenset[str] | None = connection.state.get(_STATE_KEY)
    return scope


def record_holder(connection: ASGIConnection[Any, Any, Any, Any], holder: bytes) -> None:
    """Note which key the connection's request came with (an opaque identity, never shown)."""
    connection.state[_HOLDER_KEY] = holder


def request_holder(connection: ASGIConnection[Any, Any, Any, Any]) -> bytes | None:
    """The identity of the connection's key; None when no key was matched (a server without keys)."""
    holder: bytes | None = connection.state.get(_HOLDER_KEY)
    return holder


def visible(connection: ASGIConnection[Any, Any, Any, Any], model: str) -> bool:
    """Whether the connection's key may see ``model`` (its own name)."""
    scope = request_scope(connection)
    return scope is None or model in scope


def allowed_model(
    connection: ASGIConnection[Any, Any, Any, Any],
    requested: str | None,
    resolved: str | None,
    active: str | None,
    switching_to: str | None = None,
) -> str | None:
    """The model to admit the request to, refusing one the key may not use as a name no model has.

    A request that names no model goes to the model that answers it, checked here rather than the active one:
    for a limited key, the target of a switch under way if the key may use it, else the active model if it may
    (which then waits for or is refused by that model's own rules, never answered by the target).

    Args:
        connection: The request.
        requested: The name the client sent (None: it names none).
        resolved: ``requested`` resolved to a model's own name (unknown names come back unchanged).
        active: The active model.
        switching_to: The target of a switch under way.

    Returns:
        ``resolved``; for a request naming no model, the model it must be admitted to, or None (the manager's
        choice) for a key that may use every model.

    Raises:
        ModelNotFound: ``resolved`` is not one of the key's models (configured or not: the same answer).
        NoModelForKey: the request names no model, and neither the switch's target nor the active model is one
            of the key's.
    """
    scope = request_scope(connection)
    if scope is None:
        return resolved
    if requested is None:
        for candidate in (switching_to, active):
            if candidate is not None and candidate in scope:
                return candidate
        raise NoModelForKey(scope)
    if resolved not in scope:
        raise ModelNotFound(requested, scope)
    return resolved


def hidden_names(scope: frozenset[str] | None, models: Mapping[str, ModelProfile]) -> frozenset[str]:
    """Every name (model, alias, LoRA adapter) of the models outside ``scope`` (None: every model, so none)."""
    if scope is None:
        return frozenset()
    return frozenset(
        name
        for model, profile in models.items()
        if model not in scope
        for name in (model, *profile.aliases, *(profile.lora_modules or {}))
    )


def shown_to(error: EngineError, scope: frozenset[str] | None, models: Mapping[str, ModelProfile]) -> EngineError:
    """``error`` as a key limited to ``scope`` may see it: each model outside the scope named only "another model".

    The manager's messages quote each name (``'beta'``), and only the message carries them: a redacted copy keeps
    the status, code and ``Retry-After`` and drops the extra fields (``details``), which may name models too.
    A "not found" is made for the key already (it lists the key's models) and quotes the name the client sent.
    """
    if isinstance(error, (ModelNotFound, NoModelForKey)):
        return error  # made for the key already: they list its models and the name the client sent
    message = error.message
    for name in sorted(hidden_names(scope, models), key=len, reverse=True):
        message = message.replace(f"'{name}'", "another model")
    if message == error.message:
        return error
    shown = EngineError(message)
    shown.status_code, shown.code, shown.retry_after = error.status_code, error.code, error.retry_after
    return shown
