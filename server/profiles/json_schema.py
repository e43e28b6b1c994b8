"""The profile file's JSON Schema and field reference, both read from the msgspec Structs that validate profiles.

``turnout schema`` prints :func:`profile_json_schema`; the docs site's reference page is rendered from
:func:`field_reference` (``docs/hooks/profile_reference.py``). Neither is written by hand: a field's type, bounds
and default come from msgspec, its description from the ``Attributes:`` section of its Struct's docstring.

The file is not the resolved :class:`Profile`: it has no ``path`` (the loader sets it), ``default_model`` may be
left out, a model's every other key goes to vLLM's ``AsyncEngineArgs`` (``engine_args`` in the Struct), and
top-level keys that start with ``x-`` hold YAML anchors.
"""

from __future__ import annotations

import copy
import inspect
import re
from typing import Any

import msgspec

from server.profiles.schema import ApiKeyScope, ModelProfile, Profile, ServerSection, Switching

__all__ = [
    "NOT_FILE_KEYS",
    "REFERENCE_STRUCTS",
    "FieldDoc",
    "StructDoc",
    "field_reference",
    "profile_json_schema",
]

#: Where each profile Struct sits in a profile file, in the reference's order.
REFERENCE_STRUCTS: tuple[tuple[str, type[msgspec.Struct]], ...] = (
    ("(top level)", Profile),
    ("models.NAME", ModelProfile),
    ("switching", Switching),
    ("server", ServerSection),
    ("server.api_keys[]", ApiKeyScope),
)
#: Struct fields that are no key of the file: what the loader sets, and where a model's other keys are collected.
NOT_FILE_KEYS: dict[type[msgspec.Struct], frozenset[str]] = {
    Profile: frozenset({"path"}),
    ModelProfile: frozenset({"engine_args"}),
}
_DOCSTRING_FIELD = re.compile(r"^ {4}(\w+): (.*)$")


class FieldDoc(msgspec.Struct, frozen=True, kw_only=True):
    """One key of a profile file, as the reference shows it.

    Attributes:
        name: The key.
        type: The JSON Schema type, in words (``integer >= 1 | null``).
        default: The default as YAML would spell it, or ``None`` when the key is required.
        required: Whether the key must be given.
        description: The field's text from its Struct's docstring.
        example: A ``key: value`` line that validates.
    """

    name: str
    type: str
    default: str | None
    required: bool
    description: str
    example: str


class StructDoc(msgspec.Struct, frozen=True, kw_only=True):
    """One section of a profile file: where it sits, what it is, and its keys."""

    where: str
    summary: str
    fields: list[FieldDoc]


def profile_json_schema() -> dict[str, Any]:
    """The JSON Schema (2020-12) of a profile file, for editors (``# yaml-language-server: $schema=...``)."""
    schema = copy.deepcopy(msgspec.json.schema(Profile))
    defs = schema["$defs"]
    top = defs["Profile"]
    for struct, keys in NOT_FILE_KEYS.items():
        section = defs[struct.__name__]
        for key in keys:
            section["properties"].pop(key, None)
            if key in section.get("required", []):
                section["required"].remove(key)
    top["required"] = ["models"]
    top["patternProperties"] = {"^x-": {}}
    # A model's other keys are vLLM's engine arguments, which vLLM's own declarations check (turnout validate).
    defs["ModelProfile"]["additionalProperties"] = True
    for section in defs.values():
        texts = _field_texts(_struct(section["title"]))
        section["description"] = _summary(section.get("description", ""))
        for name, prop in section["properties"].items():
            if name in texts:
                prop["description"] = texts[name]
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "Turnout profile", **schema}


def field_reference() -> list[StructDoc]:
    """Every key of every profile section, with its type, default, bounds, description and an example."""
    defs = msgspec.json.schema(Profile)["$defs"]
    docs = []
    for where, struct in REFERENCE_STRUCTS:
        section = defs[struct.__name__]
        texts = _field_texts(struct)
        skip = NOT_FILE_KEYS.get(struct, frozenset())
        fields = []
        for field in msgspec.structs.fields(struct):
            if field.encode_name in skip:
                continue
            prop = section["properties"][field.encode_name]
            required = field.required and not (struct is Profile and field.name == "default_model")
            default = None if required else _default_text(field)
            fields.append(
                FieldDoc(
                    name=field.encode_name,
                    type=_type_text(prop, defs),
                    default=default,
                    required=required,
                    description=texts.get(field.name, ""),
                    example=f"{field.encode_name}: {_example(prop, defs, field.encode_name)}",
                )
            )
        summary = "The file's top-level keys." if struct is Profile else _summary(inspect.getdoc(struct) or "")
        docs.append(StructDoc(where=where, summary=summary, fields=fields))
    return docs


def _struct(title: str) -> type[msgspec.Struct]:
    return next(struct for _, struct in REFERENCE_STRUCTS if struct.__name__ == title)


def _summary(docstring: str) -> str:
    return docstring.split("\n\n", 1)[0].replace("\n", " ").strip()


def _field_texts(struct: type[msgspec.Struct]) -> dict[str, str]:
    """The ``Attributes:`` section of a Struct's docstring: field name to its text, continuation lines joined."""
    doc = inspect.getdoc(struct) or ""
    _, _, section = doc.partition("Attributes:\n")
    texts: dict[str, str] = {}
    name = None
    for line in section.splitlines():
        match = _DOCSTRING_FIELD.match(line)
        if match:
            name = match.group(1)
            texts[name] = match.group(2).strip()
        elif name is not None and line.startswith(" " * 8):
            texts[name] += " " + line.strip()
        elif line.strip():
            break
    return texts


def _default_text(field: msgspec.structs.FieldInfo) -> str:
    if field.required:  # required by the resolved profile, filled in by the loader when the file leaves it out
        return "(see below)"
    value = field.default_factory() if field.default is msgspec.NODEFAULT else field.default
    if isinstance(value, msgspec.Struct):
        return "(every key's default)"
    return _yaml(value)


def _yaml(value: Any) -> str:
    if value is None:
        return "null (unset)"
    return msgspec.json.encode(value).decode()


def _type_text(prop: dict[str, Any], defs: dict[str, Any]) -> str:
    """A property's schema in words: ``integer >= 1``, ``"manual" | "auto"``, ``map of string to models.NAME``."""
    if "anyOf" in prop:
        return " | ".join(_type_text(option, defs) for option in prop["anyOf"])
    if "$ref" in prop:
        name = prop["$ref"].rsplit("/", 1)[1]
        return next(where for where, struct in REFERENCE_STRUCTS if struct.__name__ == name)
    if "enum" in prop:
        return " | ".join(msgspec.json.encode(value).decode() for value in prop["enum"])
    kind = prop.get("type", "any")
    if kind == "array":
        return f"list of {_type_text(prop.get('items', {}), defs)}"
    if kind == "object":
        values = prop.get("additionalProperties")
        return f"map of string to {_type_text(values, defs)}" if isinstance(values, dict) and values else "mapping"
    bounds = [
        f"{sign} {prop[key]}"
        for key, sign in (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="), ("exclusiveMaximum", "<"))
        if key in prop
    ]
    if "pattern" in prop:
        bounds.append(f"matching {prop['pattern']}")
    return " ".join([str(kind), *bounds]) if bounds else str(kind)


def _example(prop: dict[str, Any], defs: dict[str, Any], name: str) -> str:
    """A value that validates against ``prop``, as YAML flow text; a non-default one where the type allows."""
    if "anyOf" in prop:
        options = [option for option in prop["anyOf"] if option.get("type") != "null"]
        return _example(options[0], defs, name) if options else "null"
    if "$ref" in prop:
        struct = _struct(prop["$ref"].rsplit("/", 1)[1])
        section = defs[struct.__name__]
        keys = section.get("required") or [next(iter(section["properties"]))]
        return "{" + ", ".join(f"{key}: {_example(section['properties'][key], defs, key)}" for key in keys) + "}"
    if "enum" in prop:
        values = [v for v in prop["enum"] if v != prop.get("default")] or prop["enum"]
        return msgspec.json.encode(values[-1]).decode()
    kind = prop.get("type")
    if kind == "boolean":
        return "false" if prop.get("default") is True else "true"
    if kind in ("integer", "number"):
        if "maximum" in prop:
            return str(prop["maximum"] * 0.8)
        default = prop.get("default")
        if name.endswith("_bytes"):
            value: float = 1 << 30
        elif isinstance(default, int | float) and default > 0:
            value = default * 2
        else:
            value = 600 if name.endswith("_s") else 8
        return str(int(value) if kind == "integer" or value == int(value) else value)
    if kind == "string":
        return '"512MiB"' if "pattern" in prop else f'"{_string_example(name)}"'
    if kind == "array":
        return f"[{_example(prop.get('items', {}), defs, name)}]"
    if kind == "object":
        values = prop.get("additionalProperties")
        key = "NAME"
        return "{" + f"{key}: {_example(values, defs, name) if isinstance(values, dict) and values else 1}" + "}"
    return "null"


def _string_example(name: str) -> str:
    """A plausible string for a key, from its name: env var names, paths, parsers and model ids."""
    examples = {
        "chat_template": "../templates/qwen3.jinja",
        "quant_config": "quant/fp8.json",
        "reload_dirs": "../profiles",
        "lora_modules": "adapters/qwen-sql",
        "model": "Qwen/Qwen3-8B",
        "default_model": "qwen",
        "tool_call_parser": "hermes",
        "reasoning_parser": "qwen3",
        "response_role": "assistant",
        "served_model_name": "qwen-chat",
        "allowed_hosts": "turnout.lan",
        "models": "qwen",
        "key_env": "TEAM_A_KEY",
    }
    if name in examples:
        return examples[name]
    return name.removesuffix("_env").upper() if name.endswith("_env") else "NAME"
