"""Pydantic's JSON Schema → a Kubernetes structural OpenAPI v3 schema.

Kubernetes accepts a subset of JSON Schema: every node has a `type` (or is int-or-string /
preserve-unknown-fields), no `$ref`, no `title`, no `const`, `exclusiveMinimum` is a
boolean beside `minimum`, and `properties` and `additionalProperties` never meet. Defaults
are kept where the API server can apply them: scalars, and `{}` for nested objects whose
own fields have defaults (the server fills those in).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

Schema = dict[str, Any]
# marks a field typed `X | None`: absent means "not set", so it gets no object default
OPTIONAL = "x-pagoda-optional"


def structural_schema(model: type[BaseModel]) -> Schema:
    raw = model.model_json_schema(by_alias=True, ref_template="#/$defs/{model}")
    defs = raw.pop("$defs", {})
    return _convert(raw, defs)


def _convert(node: Schema, defs: dict[str, Schema]) -> Schema:
    node = _resolve(node, defs)
    out: Schema = {}
    for key, value in node.items():
        if key == "title" or (key == "additionalProperties" and value is False):
            continue
        if key == "properties":
            out[key] = {name: _convert(sub, defs) for name, sub in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = _convert(value, defs)
        elif key == "description":
            out[key] = " ".join(value.split())  # one paragraph: `kubectl explain` wraps it
        elif key == "const":
            out["enum"] = [value]
        elif key == "exclusiveMinimum":
            out["minimum"], out["exclusiveMinimum"] = value, True
        elif key == "exclusiveMaximum":
            out["maximum"], out["exclusiveMaximum"] = value, True
        else:
            out[key] = value
    _fix_default(out)
    _default_nested_objects(out)
    if "required" in out:
        out["required"] = [n for n in out["required"] if "default" not in out["properties"][n]]
        if not out["required"]:
            del out["required"]
    return out


def _resolve(node: Schema, defs: dict[str, Schema]) -> Schema:
    """Inline `$ref`s and collapse `X | None` (optional fields) to X, keeping siblings
    such as `default` and `description`."""
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[1]]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    if "anyOf" in node and not node.get("x-kubernetes-int-or-string"):
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        if len(options) != 1:
            raise ValueError(f"cannot express anyOf {node['anyOf']} structurally")
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        node = {**_resolve(options[0], defs), **rest, OPTIONAL: True}
    if node.get("x-kubernetes-int-or-string"):
        node = {k: v for k, v in node.items() if k not in ("anyOf", "type")}
    return node


def _default_nested_objects(node: Schema) -> None:
    """An optional object field whose own fields have defaults defaults to those values,
    so a left-out block reads as its defaults (and its CEL rules, which the API server
    checks against the default itself, see every key)."""
    required = set(node.get("required", ()))
    for name, prop in node.get("properties", {}).items():
        optional = prop.pop(OPTIONAL, False)
        if name not in required and not optional and _has_defaulted_fields(prop):
            prop["default"] = _defaults_of(prop)


def _defaults_of(node: Schema) -> dict[str, Any]:
    return {n: p["default"] for n, p in node.get("properties", {}).items() if "default" in p}


def _has_defaulted_fields(node: Schema) -> bool:
    return any("default" in p for p in node.get("properties", {}).values())


def _fix_default(node: Schema) -> None:
    """Keep scalar defaults; None, lists and objects are dropped here (object defaults are
    rebuilt from their fields' defaults by the parent)."""
    if "default" in node and (node["default"] is None or isinstance(node["default"], dict | list)):
        del node["default"]
