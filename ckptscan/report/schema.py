"""The summary's JSON Schema (``schema.json``, draft 2020-12) and a small validator for the subset
of keywords it uses, so that the package and its tests need no ``jsonschema`` dependency.

Supported: ``type`` (string or list), ``enum``, ``const``, ``properties``, ``required``,
``additionalProperties`` (bool or schema), ``items``, ``minimum``, ``maximum``, ``minItems``,
``anyOf``, ``$ref`` to ``#/$defs/<name>``.  Any other validation keyword raises ``ValueError``, so
the schema cannot silently use something this validator ignores.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

SCHEMA_PATH = Path(__file__).with_name("schema.json")
_ANNOTATIONS = {"$schema", "$id", "$defs", "$comment", "title", "description", "default", "examples"}
_KNOWN = {
    "type",
    "enum",
    "const",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "minimum",
    "maximum",
    "minItems",
    "anyOf",
    "$ref",
} | _ANNOTATIONS


@lru_cache(maxsize=1)
def summary_schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text())


def _is_type(x, t: str) -> bool:
    if t == "null":
        return x is None
    if t == "boolean":
        return isinstance(x, bool)
    if t == "integer":
        return isinstance(x, int) and not isinstance(x, bool) or (isinstance(x, float) and x.is_integer())
    if t == "number":
        return isinstance(x, (int, float)) and not isinstance(x, bool)
    if t == "string":
        return isinstance(x, str)
    if t == "array":
        return isinstance(x, list)
    if t == "object":
        return isinstance(x, dict)
    raise ValueError(f"unknown JSON type {t!r}")


def validate(instance, schema: dict | None = None) -> list[str]:
    """Every violation as ``"<json path>: <problem>"``; an empty list when the instance is valid."""
    root = summary_schema() if schema is None else schema
    errors: list[str] = []
    _check(instance, root, root, "$", errors)
    return errors


def _check(x, sch, root, path, errors) -> None:
    if sch is True or sch == {}:
        return
    if sch is False:
        errors.append(f"{path}: not allowed")
        return
    unknown = set(sch) - _KNOWN
    if unknown:
        raise ValueError(f"schema keyword(s) not supported by this validator: {sorted(unknown)}")
    if "$ref" in sch:
        ref = sch["$ref"]
        if not ref.startswith("#/$defs/"):
            raise ValueError(f"unsupported $ref {ref!r}")
        _check(x, root["$defs"][ref[len("#/$defs/") :]], root, path, errors)
    if "type" in sch:
        types = sch["type"] if isinstance(sch["type"], list) else [sch["type"]]
        if not any(_is_type(x, t) for t in types):
            errors.append(f"{path}: expected {'/'.join(types)}, got {type(x).__name__}")
            return
    if "enum" in sch and x not in sch["enum"]:
        errors.append(f"{path}: {x!r} not one of {sch['enum']}")
    if "const" in sch and x != sch["const"]:
        errors.append(f"{path}: {x!r} is not {sch['const']!r}")
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        if "minimum" in sch and x < sch["minimum"]:
            errors.append(f"{path}: {x} < minimum {sch['minimum']}")
        if "maximum" in sch and x > sch["maximum"]:
            errors.append(f"{path}: {x} > maximum {sch['maximum']}")
    if isinstance(x, dict):
        props = sch.get("properties", {})
        for k in sch.get("required", []):
            if k not in x:
                errors.append(f"{path}: missing required key {k!r}")
        for k, v in x.items():
            if k in props:
                _check(v, props[k], root, f"{path}.{k}", errors)
            elif "additionalProperties" in sch:
                _check(v, sch["additionalProperties"], root, f"{path}.{k}", errors)
    if isinstance(x, list):
        if "minItems" in sch and len(x) < sch["minItems"]:
            errors.append(f"{path}: fewer than {sch['minItems']} items")
        if "items" in sch:
            for i, v in enumerate(x):
                _check(v, sch["items"], root, f"{path}[{i}]", errors)
    if "anyOf" in sch:
        branches = []
        for sub in sch["anyOf"]:
            e: list[str] = []
            _check(x, sub, root, path, e)
            if not e:
                break
            branches.append(e)
        else:
            errors.append(f"{path}: matches none of anyOf ({'; '.join(b[0] for b in branches if b)})")
