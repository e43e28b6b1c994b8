"""The OpenAPI document: every route's request body and the bearer schemes that guard the routes.

The OpenAI routes read their body in the admission dependency (one parse, no Litestar ``data``), so Litestar
cannot see it; each such route names the OpenAPI component of its body with :func:`request_body`, and
:func:`document_request_bodies` fills those components with vLLM's request models as JSON Schema (passed in by
the CLI, which may import vLLM's frontend), or with a plain ``object`` schema when none are given (test fakes).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from litestar import Litestar
from litestar.openapi.spec import (
    Components,
    OpenAPIMediaType,
    PathItem,
    Reference,
    RequestBody,
    Schema,
    SecurityRequirement,
    SecurityScheme,
)
from litestar.openapi.spec.operation import Operation

__all__ = [
    "ADMIN_SECURITY",
    "API_KEY_SECURITY",
    "REF_PREFIX",
    "document_request_bodies",
    "request_body",
    "security_components",
]

REF_PREFIX = "#/components/schemas/"
_ADMIN_SCHEME = "AdminToken"
_API_KEY_SCHEME = "ApiKey"
#: Security requirements: admin routes need the admin token; the OpenAI routes the API key when one is set.
ADMIN_SECURITY: list[SecurityRequirement] = [{_ADMIN_SCHEME: []}]
API_KEY_SECURITY: list[SecurityRequirement] = [{_API_KEY_SCHEME: []}]


def request_body(component: str, media_type: str = "application/json") -> type[Operation]:
    """An operation class whose request body is the schema component ``component`` (required), as ``media_type``.

    The speech routes' bodies are vLLM's form models sent as ``multipart/form-data``.
    """

    @dataclass
    class _WithBody(Operation):
        def __post_init__(self) -> None:
            if self.request_body is None:
                schema = Reference(ref=REF_PREFIX + component)
                self.request_body = RequestBody(
                    content={media_type: OpenAPIMediaType(schema=schema)},
                    required=True,
                    description=f"An OpenAI-compatible `{component}` (vLLM's request model).",
                )

    _WithBody.__name__ = f"{component}Operation"
    return _WithBody


def security_components() -> Components:
    """The bearer schemes, for ``OpenAPIConfig(components=...)``."""
    return Components(
        security_schemes={
            _ADMIN_SCHEME: SecurityScheme(
                type="http",
                scheme="bearer",
                description="The admin token (the env var named by the profile's server.admin_token_env).",
            ),
            _API_KEY_SCHEME: SecurityScheme(
                type="http",
                scheme="bearer",
                description=(
                    "The API key, when the server has one (--api-key-env, --api-key-file, server.api_key_env or "
                    "VLLM_API_KEY)."
                ),
            ),
        }
    )


def document_request_bodies(app: Litestar, schemas: Mapping[str, Mapping[str, Any]] | None) -> None:
    """Add the request body components to ``app``'s OpenAPI document (built now, then cached by Litestar).

    Args:
        app: The app whose routes used :func:`request_body`.
        schemas: Component name to JSON Schema (vLLM's request models and their definitions, with references
            under :data:`REF_PREFIX`); None documents each body as a plain JSON object.
    """
    document = app.openapi_schema
    components = document.components
    existing: dict[str, Any] = dict(components.schemas or {})
    given = dict(schemas or {})
    for name in _referenced_bodies(document.paths or {}):
        given.setdefault(name, {"type": "object", "description": "A JSON object; see the OpenAI API reference."})
    for name, schema in given.items():
        # Litestar's own components (the admin routes' msgspec Structs) keep their names.
        existing.setdefault(name, dict(schema))
    # Litestar renders spec objects and plain dicts alike: JSON Schema from pydantic goes in as it is.
    components.schemas = cast(dict[str, Schema], existing)


def _referenced_bodies(paths: Mapping[str, PathItem]) -> set[str]:
    """The component names that operations refer to as their request body."""
    names = set()
    for item in paths.values():
        for method in ("get", "put", "post", "delete", "patch"):
            operation: Operation | None = getattr(item, method, None)
            body = operation.request_body if operation is not None else None
            if isinstance(body, RequestBody):
                for media in body.content.values():
                    if isinstance(media.schema, Reference) and media.schema.ref.startswith(REF_PREFIX):
                        names.add(media.schema.ref.removeprefix(REF_PREFIX))
    return names
