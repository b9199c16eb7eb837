"""Hypothesis strategies from the JSON Schemas pydantic publishes as tool inputSchemas.

hypothesis-jsonschema would do this, but its 0.23.1 (the latest) drives private Hypothesis
internals that Hypothesis 6.170 changed (`many.more()` is gone), so it fails on every object
schema. Tool schemas use a small subset, which this covers: $ref/$defs, anyOf/oneOf, a one-item
allOf, const, enum, object (properties, required, additionalProperties), array (items,
minItems, maxItems), string (minLength, maxLength, pattern), integer and number (inclusive and
exclusive bounds), boolean, null. An unknown keyword that constrains values raises, so a tool
whose schema needs more is noticed instead of being fed values its schema forbids.
"""

from __future__ import annotations

import math
from typing import Any

from hypothesis import strategies as st

ANNOTATIONS = {"title", "description", "default", "examples", "format", "$defs", "deprecated", "readOnly", "writeOnly"}
HANDLED = {
    "$ref",
    "anyOf",
    "oneOf",
    "allOf",
    "const",
    "enum",
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "pattern",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
}
MAX_COLLECTION = 4  # keeps examples small: bounds are probed by the boundary-value test
MAX_TEXT = 40

JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
ANY_JSON = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


def from_schema(schema: dict[str, Any], defs: dict[str, Any] | None = None) -> st.SearchStrategy[Any]:
    """A strategy for values `schema` accepts (`defs`: the root's $defs)."""
    defs = schema.get("$defs", {}) if defs is None else defs
    unknown = set(schema) - HANDLED - ANNOTATIONS
    if unknown:
        raise ValueError(f"schema keywords this generator does not handle: {sorted(unknown)}")
    if "$ref" in schema:
        return st.deferred(lambda: from_schema(defs[schema["$ref"].rsplit("/", 1)[-1]], defs))
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return st.one_of([from_schema(sub, defs) for sub in schema[key]])
    if "allOf" in schema:
        if len(schema["allOf"]) != 1:
            raise ValueError("allOf with more than one schema")
        return from_schema(schema["allOf"][0], defs)
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kind = schema.get("type")
    if isinstance(kind, list):
        return st.one_of([from_schema({**schema, "type": k}, defs) for k in kind])
    if kind == "object" or (kind is None and "properties" in schema):
        return _object(schema, defs)
    if kind == "array":
        items = from_schema(schema["items"], defs) if isinstance(schema.get("items"), dict) else ANY_JSON
        low = schema.get("minItems", 0)
        return st.lists(items, min_size=low, max_size=max(low, min(schema.get("maxItems", MAX_COLLECTION), MAX_COLLECTION)))
    if kind == "string":
        low = schema.get("minLength", 0)
        high = max(low, min(schema.get("maxLength", MAX_TEXT), MAX_TEXT))
        if "pattern" in schema:
            return st.from_regex(schema["pattern"], fullmatch=True).filter(
                lambda s: low <= len(s) <= schema.get("maxLength", 1e9)
            )
        return st.text(min_size=low, max_size=high)
    if kind == "integer":
        low = schema.get("minimum", -math.inf)
        high = schema.get("maximum", math.inf)
        if "exclusiveMinimum" in schema:
            low = max(low, math.floor(schema["exclusiveMinimum"]) + 1)
        if "exclusiveMaximum" in schema:
            high = min(high, math.ceil(schema["exclusiveMaximum"]) - 1)
        return st.integers(None if low == -math.inf else int(low), None if high == math.inf else int(high))
    if kind == "number":
        return st.floats(
            schema.get("minimum", schema.get("exclusiveMinimum")),
            schema.get("maximum", schema.get("exclusiveMaximum")),
            exclude_min="exclusiveMinimum" in schema,
            exclude_max="exclusiveMaximum" in schema,
            allow_nan=False,
            allow_infinity=False,
        )
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind is None:
        return ANY_JSON
    raise ValueError(f"unknown schema type {kind!r}")


def _object(schema: dict[str, Any], defs: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    properties = schema.get("properties", {})
    required = set(schema.get("required", []))
    fixed = st.fixed_dictionaries(
        {name: from_schema(sub, defs) for name, sub in properties.items() if name in required},
        optional={name: from_schema(sub, defs) for name, sub in properties.items() if name not in required},
    )
    extra = schema.get("additionalProperties", True)
    if not isinstance(extra, dict):
        return fixed  # False: no other keys; True (pydantic's default is False via extra="forbid"): keep to the named ones
    values = from_schema(extra, defs)
    more = st.dictionaries(st.text(max_size=12).filter(lambda k: k not in properties), values, max_size=MAX_COLLECTION)
    return st.tuples(fixed, more).map(lambda pair: {**pair[1], **pair[0]})
