"""Strict JSON schemas for tool arguments, generated from the pydantic models.

OpenAI's strict function calling (and the common subset other providers accept) wants every object
closed (``additionalProperties: false``), every property listed in ``required`` (optional ones made
nullable instead), no ``$ref`` with siblings, and no numeric or length keywords. Constraints and
defaults are therefore moved into the field's description, where the model still reads them, while
pydantic keeps enforcing them when the arguments arrive.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from tools.errors import ToolDefinitionError

#: Keywords outside the strict subset, and how each reads in a description.
_CONSTRAINT_WORDS: dict[str, str] = {
    "minimum": ">= {}",
    "maximum": "<= {}",
    "exclusiveMinimum": "> {}",
    "exclusiveMaximum": "< {}",
    "multipleOf": "a multiple of {}",
    "minLength": "at least {} characters",
    "maxLength": "at most {} characters",
    "pattern": "matching /{}/",
    "format": "format {}",
    "minItems": "at least {} items",
    "maxItems": "at most {} items",
    "uniqueItems": "unique items",
}
_NOISE = ("title", "examples", "readOnly", "writeOnly", "deprecated")


def strict_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's argument schema in the strict-mode subset (see the module docstring)."""
    raw = model.model_json_schema()
    defs: Mapping[str, Any] = raw.pop("$defs", {})
    # The tool description already says what the tool does; the model's own docstring is noise.
    raw.pop("description", None)
    out = _convert(raw, defs, seen=())
    if out.get("type") != "object":
        raise ToolDefinitionError(f"arguments model {model.__name__} must produce an object schema")
    return out


def _convert(node: Mapping[str, Any], defs: Mapping[str, Any], seen: tuple[str, ...]) -> dict[str, Any]:
    node = dict(node)
    if "$ref" in node:
        node = _inline_ref(node, defs, seen)
        seen = (*seen, node.pop("__ref__"))
    if "allOf" in node and len(node["allOf"]) == 1:
        # Older pydantic wraps a described $ref in a one-element allOf.
        inner = _convert(node.pop("allOf")[0], defs, seen)
        node = {**inner, **node}
    for key in ("oneOf", "allOf", "prefixItems", "patternProperties", "not", "if"):
        if key in node:
            raise ToolDefinitionError(f"strict tool schemas cannot use {key!r}")

    notes = _move_out_constraints(node)
    for key in _NOISE:
        node.pop(key, None)
    if "anyOf" in node:
        node["anyOf"] = [_convert(option, defs, seen) for option in node["anyOf"]]
    if "items" in node:
        node["items"] = _convert(node["items"], defs, seen)
    if node.get("type") == "object" or "properties" in node:
        _close_object(node, defs, seen)
    if notes:
        described = node.get("description", "").rstrip()
        node["description"] = f"{described} ({'; '.join(notes)})".strip()
    return node


def _inline_ref(node: dict[str, Any], defs: Mapping[str, Any], seen: tuple[str, ...]) -> dict[str, Any]:
    name = str(node.pop("$ref")).rsplit("/", 1)[-1]
    if name in seen:
        raise ToolDefinitionError(f"recursive argument model {name!r} cannot be sent as a strict schema")
    if name not in defs:
        raise ToolDefinitionError(f"schema reference {name!r} has no definition")
    # Sibling keywords (a field's description) win over the referenced model's own.
    return {**copy.deepcopy(defs[name]), **node, "__ref__": name}


def _move_out_constraints(node: dict[str, Any]) -> list[str]:
    notes = [word.format(node.pop(key)) for key, word in _CONSTRAINT_WORDS.items() if key in node]
    if "default" in node:
        default = node.pop("default")
        if default is not None:
            notes.append(f"default {default!r}; send null for the default")
    return notes


def _close_object(node: dict[str, Any], defs: Mapping[str, Any], seen: tuple[str, ...]) -> None:
    props = node.get("properties")
    if not props:
        if node.get("additionalProperties") not in (None, False):
            raise ToolDefinitionError("strict tool schemas cannot take free-form objects (dict fields)")
        props = {}
    required = set(node.get("required", ()))
    converted: dict[str, Any] = {}
    for name, sub in props.items():
        prop = _convert(sub, defs, seen)
        converted[name] = prop if name in required else _nullable(prop)
    node["type"] = "object"
    node["properties"] = converted
    node["required"] = list(converted)
    node["additionalProperties"] = False


def _nullable(prop: dict[str, Any]) -> dict[str, Any]:
    """Strict mode has no optional properties: an optional one is required but may be null."""
    if "anyOf" in prop:
        if not any(option.get("type") == "null" for option in prop["anyOf"]):
            prop["anyOf"] = [*prop["anyOf"], {"type": "null"}]
        return prop
    kind = prop.get("type")
    if isinstance(kind, str) and kind != "null":
        prop["type"] = [kind, "null"]
    elif isinstance(kind, list) and "null" not in kind:
        prop["type"] = [*kind, "null"]
    elif kind is None:
        wrapped: dict[str, Any] = {"anyOf": [prop, {"type": "null"}]}
        if "description" in prop:
            wrapped["description"] = prop.pop("description")
        return wrapped
    if "enum" in prop and None not in prop["enum"]:
        prop["enum"] = [*prop["enum"], None]
    return prop
