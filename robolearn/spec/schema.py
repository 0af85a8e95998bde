"""The policy spec's JSON schema, generated from its dataclasses, and a small checker for it.

:func:`schema_of` turns the annotations of :class:`~robolearn.spec.manifest.PolicySpec` (and the
dataclasses it holds) into a JSON schema (draft 2020-12): objects with their required fields and
no unknown keys, numbers that may be ``"inf"``/``"-inf"``, enums for the literal choices, and the
minimums the fields declare. Tools outside robolearn validate ``policy_spec.json`` and
``manifest.json`` against it.

:func:`schema_errors` checks a JSON value against such a schema. It implements the keywords the
generated schema uses (``type``, ``enum``, ``anyOf``, ``properties``, ``required``,
``additionalProperties``, ``items``, ``prefixItems``, ``minItems``, ``maxItems``, ``minimum``,
``exclusiveMinimum``, ``$ref`` into ``$defs``) and no others: enough to test that what the env
writes matches the schema, without a dependency.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Literal

_NUMBER = {"anyOf": [{"type": "number"}, {"enum": ["inf", "-inf"]}]}
"""A float: JSON has no infinity, so the spec writes it as a string."""


def schema_of(cls: type, title: str = "") -> dict[str, Any]:
    """The JSON schema of dataclass ``cls`` (nested dataclasses under ``$defs``).

    A dataclass with a true ``JSON_FLAT`` class attribute is written as one object holding its
    ``type`` beside free-form fields (``ModelSpec``), and described so.
    """
    defs: dict[str, Any] = {}
    root = _schema(cls, defs)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": title or cls.__name__,
        **root,
        "$defs": defs,
    }


def _schema(annotation: Any, defs: dict[str, Any]) -> dict[str, Any]:
    """The schema of one annotation; dataclasses are added to ``defs`` once and referenced."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [_schema(a, defs) for a in typing.get_args(annotation)]}
    if origin is Literal:
        return {"enum": list(typing.get_args(annotation))}
    if annotation is type(None):
        return {"type": "null"}
    if annotation is bool:
        return {"type": "boolean"}
    if annotation is int:
        return {"type": "integer"}
    if annotation is float:
        return dict(_NUMBER)
    if annotation is str:
        return {"type": "string"}
    if annotation is Any:
        return {}
    if origin is tuple:
        args = typing.get_args(annotation)
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": _schema(args[0], defs)}
        return {
            "type": "array",
            "prefixItems": [_schema(a, defs) for a in args],
            "minItems": len(args),
            "maxItems": len(args),
        }
    if origin is dict:
        return {"type": "object", "additionalProperties": _schema(typing.get_args(annotation)[1], defs)}
    if getattr(annotation, "JSON_FLAT", False):
        # Written flat: the class name under "type" beside the model's own fields.
        defs.setdefault(
            annotation.__name__,
            {"type": "object", "required": ["type"], "properties": {"type": {"type": "string"}}, "additionalProperties": True},
        )
        return {"$ref": f"#/$defs/{annotation.__name__}"}
    if dataclasses.is_dataclass(annotation):
        name = annotation.__name__
        if name not in defs:
            defs[name] = {}  # reserved first: a recursive reference finds it
            hints = typing.get_type_hints(annotation)
            props: dict[str, Any] = {}
            required = []
            for f in dataclasses.fields(annotation):
                prop = _schema(hints[f.name], defs)
                for key in ("minimum", "exclusiveMinimum"):
                    if key in f.metadata:
                        prop = {**prop, key: f.metadata[key]} if "anyOf" not in prop else {
                            "anyOf": [{**prop["anyOf"][0], key: f.metadata[key]}, *prop["anyOf"][1:]]
                        }
                props[f.name] = prop
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                    required.append(f.name)
            defs[name] = {"type": "object", "properties": props, "required": required, "additionalProperties": False}
        return {"$ref": f"#/$defs/{name}"}
    raise TypeError(f"no JSON schema for annotation {annotation!r}")


_TYPES = {
    "null": lambda v: v is None,
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "string": lambda v: isinstance(v, str),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}


def schema_errors(value: Any, schema: dict[str, Any], root: dict[str, Any] | None = None, where: str = "$") -> list[str]:
    """Every place ``value`` breaks ``schema`` (``where``: the JSON path, ``$`` the top), empty when valid."""
    root = schema if root is None else root
    if "$ref" in schema:
        name = schema["$ref"].removeprefix("#/$defs/")
        return schema_errors(value, root["$defs"][name], root, where)
    errors: list[str] = []
    if "anyOf" in schema:
        if all(schema_errors(value, s, root, where) for s in schema["anyOf"]):
            errors.append(f"{where}: {value!r} matches none of the allowed forms")
        return errors
    kind = schema.get("type")
    if kind is not None and not _TYPES[kind](value):
        return [f"{where}: expected {kind}, got {value!r}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where}: expected one of {schema['enum']}, got {value!r}")
    if "minimum" in schema and _TYPES["number"](value) and value < schema["minimum"]:
        errors.append(f"{where}: {value!r} is below the minimum {schema['minimum']}")
    if "exclusiveMinimum" in schema and _TYPES["number"](value) and not value > schema["exclusiveMinimum"]:
        errors.append(f"{where}: {value!r} is not above {schema['exclusiveMinimum']}")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for key in schema.get("required", []):
            if key not in value:
                errors.append(f"{where}.{key}: required, missing")
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            if key in props:
                errors += schema_errors(item, props[key], root, f"{where}.{key}")
            elif extra is False:
                errors.append(f"{where}.{key}: not allowed here")
            elif isinstance(extra, dict):
                errors += schema_errors(item, extra, root, f"{where}.{key}")
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            errors.append(f"{where}: expected at least {schema['minItems']} items, got {len(value)}")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append(f"{where}: expected at most {schema['maxItems']} items, got {len(value)}")
        prefix = schema.get("prefixItems", [])
        for i, item in enumerate(value):
            sub = prefix[i] if i < len(prefix) else schema.get("items")
            if sub is not None:
                errors += schema_errors(item, sub, root, f"{where}[{i}]")
    return errors


__all__ = ["schema_errors", "schema_of"]
