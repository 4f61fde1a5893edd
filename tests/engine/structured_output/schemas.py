"""JSON schemas of the shapes clients send: nested objects, arrays, enums, patterns, anyOf,
bounded numbers, required and optional properties.

A random-weight model has no reason to close a string or an array, so strings and arrays
carry bounds (maxLength, maxItems) as real schemas often do; the grammar makes every
output end inside the schema, and max_tokens is set above the longest such output.
"""

NAME = {"type": "string", "maxLength": 8}
SCHEMAS = [
    {"type": "object", "properties": {"name": NAME}, "required": ["name"]},
    {"type": "object", "properties": {"age": {"type": "integer"}}, "required": ["age"]},
    {"type": "object", "properties": {"age": {"type": "integer", "minimum": 18, "maximum": 99}},
     "required": ["age"]},
    {"type": "object", "properties": {"score": {"type": "number", "minimum": 0, "maximum": 1}},
     "required": ["score"]},
    {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]},
    {"type": "object", "properties": {"nothing": {"type": "null"}}, "required": ["nothing"]},
    {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}},
     "required": ["color"]},
    {"type": "object", "properties": {"n": {"enum": [1, 2, 3, "many", None]}}, "required": ["n"]},
    {"type": "object", "properties": {"kind": {"const": "user"}}, "required": ["kind"]},
    {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{3}$"}},
     "required": ["code"]},
    {"type": "object", "properties": {"day": {"type": "string", "format": "date"}},
     "required": ["day"]},
    {"type": "object", "properties": {"tags": {"type": "array", "items": NAME, "maxItems": 3}},
     "required": ["tags"]},
    {"type": "object", "properties": {"ids": {"type": "array", "items": {"type": "integer"},
                                               "minItems": 2, "maxItems": 4}},
     "required": ["ids"]},
    {"type": "object", "properties": {"name": NAME, "nickname": NAME}, "required": ["name"]},
    {"type": "object", "properties": {"a": NAME, "b": {"type": "integer"},
                                      "c": {"type": "boolean"}}, "required": ["a", "b", "c"]},
    {"type": "object", "properties": {"user": {"type": "object", "properties": {
        "name": NAME, "age": {"type": "integer", "minimum": 0, "maximum": 150}},
        "required": ["name", "age"]}}, "required": ["user"]},
    {"type": "object", "properties": {"point": {"type": "object", "properties": {
        "x": {"type": "number"}, "y": {"type": "number"}}, "required": ["x", "y"]}},
     "required": ["point"]},
    {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {
        "type": "object", "properties": {"c": {"type": "integer"}}, "required": ["c"]}},
        "required": ["b"]}}, "required": ["a"]},
    {"type": "object", "properties": {"items": {"type": "array", "maxItems": 2, "items": {
        "type": "object", "properties": {"sku": NAME, "qty": {"type": "integer", "minimum": 1}},
        "required": ["sku", "qty"]}}}, "required": ["items"]},
    {"type": "object", "properties": {"value": {"anyOf": [{"type": "integer"}, NAME]}},
     "required": ["value"]},
    {"type": "object", "properties": {"value": {"anyOf": [{"type": "null"}, {"type": "boolean"}]}},
     "required": ["value"]},
    {"type": "object", "properties": {"shape": {"anyOf": [
        {"type": "object", "properties": {"radius": {"type": "number"}}, "required": ["radius"]},
        {"type": "object", "properties": {"side": {"type": "integer"}}, "required": ["side"]}]}},
     "required": ["shape"]},
    {"type": "object", "properties": {"v": {"type": ["integer", "null"]}}, "required": ["v"]},
    {"type": "object", "properties": {"pair": {"type": "array", "prefixItems": [
        {"type": "integer"}, NAME], "items": False}}, "required": ["pair"]},
    {"type": "object", "properties": {"id": {"type": "integer", "exclusiveMinimum": 0,
                                             "exclusiveMaximum": 10}}, "required": ["id"]},
    {"type": "object", "properties": {"name": {"type": "string", "minLength": 3, "maxLength": 5}},
     "required": ["name"]},
    {"type": "object", "properties": {"opt": NAME}},  # nothing required
    {"type": "object", "additionalProperties": False, "properties": {"x": {"type": "integer"}},
     "required": ["x"]},
    {"$defs": {"person": {"type": "object", "properties": {"name": NAME}, "required": ["name"]}},
     "type": "object", "properties": {"author": {"$ref": "#/$defs/person"},
                                      "editor": {"$ref": "#/$defs/person"}},
     "required": ["author", "editor"]},
    {"type": "array", "items": {"enum": ["a", "b", "c"]}, "minItems": 1, "maxItems": 5},
    {"type": "integer", "minimum": -5, "maximum": 5},
    {"type": "string", "enum": ["yes", "no"]},
    {"type": "object", "properties": {"matrix": {"type": "array", "maxItems": 2, "items": {
        "type": "array", "items": {"type": "integer"}, "maxItems": 2}}}, "required": ["matrix"]},
]  # fmt: skip
