"""Answers carry the name the client asked for, whatever string type the profile's loader gave the model name."""

from __future__ import annotations

from typing import Any

from ruamel.yaml.scalarstring import DoubleQuotedScalarString

from server.api.admission.request_admission import AdmittedRequest
from server.engine import Lease, Published


def test_a_yaml_quoted_model_name_is_replaced_by_the_alias_asked_for() -> None:
    # Found by the OpenAPI fuzz run: a profile key quoted in YAML stays a ruamel str subclass, which msgspec
    # refused to encode, so every answer to an alias was a 500.
    model = DoubleQuotedScalarString("tools")
    lease: Lease[Any] = Lease(published=Published(model, bundle=None))
    admitted = AdmittedRequest(manager=None, lease=lease, body={}, asked_as=DoubleQuotedScalarString("alias"))  # type: ignore[arg-type]
    assert admitted.as_asked('{"id":"x","model":"tools","choices":[]}') == '{"id":"x","model":"alias","choices":[]}'
