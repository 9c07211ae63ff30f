"""A few JSON Schema types that both check a request and describe it in the OpenAPI document.

Each route declares its body, query and path parameters with these; the same object validates
the request and renders its schema, so the document cannot drift from what the server accepts.
Only what the API needs is here: strings, numbers, booleans, objects with known fields, arrays,
free-form JSON objects (payloads) and any JSON value (a job's result).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

__all__ = [
    "AnyObject",
    "AnyValue",
    "Array",
    "Boolean",
    "Integer",
    "Invalid",
    "Number",
    "Object",
    "Schema",
    "String",
]

#: Free text may not contain U+0000: PostgreSQL cannot store it in text or jsonb.
NO_NUL = "^[^\\u0000]*$"
_NUL = re.compile("\x00")


class Invalid(Exception):
    """A request failed validation. ``errors`` lists ``(pointer, message)`` pairs."""

    def __init__(self, errors: list[tuple[str, str]]):
        self.errors = errors
        super().__init__("; ".join(f"{p or '/'}: {m}" for p, m in errors))


def _pointer(path: str, part: str | int) -> str:
    text = str(part).replace("~", "~0").replace("/", "~1")
    return f"{path}/{text}"


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


class Schema:
    """Base: ``check`` returns the value (possibly normalised) or records errors."""

    name: str | None = None
    description: str | None = None
    nullable: bool = False

    def json_schema(self) -> dict[str, Any]:
        raise NotImplementedError

    def render(self, components: dict[str, Any]) -> dict[str, Any]:
        """The schema for the document; named schemas go to ``components`` and are referenced."""
        body = self._render(components)
        if self.description and "description" not in body:
            body["description"] = self.description
        if self.nullable:
            body = {"anyOf": [body, {"type": "null"}]}
        if self.name is None:
            return body
        components.setdefault(self.name, body)
        return {"$ref": f"#/components/schemas/{self.name}"}

    def _render(self, components: dict[str, Any]) -> dict[str, Any]:
        return self.json_schema()

    def check(self, value: Any, path: str, errors: list[tuple[str, str]]) -> Any:
        if value is None and self.nullable:
            return None
        return self._check(value, path, errors)

    def _check(self, value: Any, path: str, errors: list[tuple[str, str]]) -> Any:
        raise NotImplementedError

    def validate(self, value: Any) -> Any:
        """Check ``value``; raise ``Invalid`` with every problem found."""
        errors: list[tuple[str, str]] = []
        result = self.check(value, "", errors)
        if errors:
            raise Invalid(errors)
        return result


@dataclass
class String(Schema):
    min_length: int = 0
    max_length: int | None = None
    pattern: str | None = None
    mismatch: str | None = None
    """What a value that does not match ``pattern`` is told (default: the pattern itself)."""
    enum: tuple[str, ...] | None = None
    format: str | None = None
    description: str | None = None
    example: str | None = None
    nullable: bool = False
    name: str | None = None
    _regex: re.Pattern[str] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.pattern is not None:
            self._regex = re.compile(self.pattern)

    def json_schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "string"}
        if self.enum is not None:
            out["enum"] = list(self.enum)
        if self.min_length:
            out["minLength"] = self.min_length
        if self.max_length is not None:
            out["maxLength"] = self.max_length
        if self.pattern is not None:
            out["pattern"] = self.pattern
        elif self.enum is None and self.format is None:
            out["pattern"] = NO_NUL  # free text
        if self.format:
            out["format"] = self.format
        if self.example is not None:
            out["example"] = self.example
        return out

    def _check(self, value: Any, path: str, errors: list[tuple[str, str]]) -> Any:
        if not isinstance(value, str):
            errors.append((path, f"expected a string, got {_type_name(value)}"))
            return value
        if self.enum is not None and value not in self.enum:
            errors.append((path, f"must be one of {', '.join(self.enum)}"))
        elif len(value) < self.min_length:
            errors.append((path, f"must be at least {self.min_length} characters"))
        elif self.max_length is not None and len(value) > self.max_length:
            errors.append((path, f"must be at most {self.max_length} characters"))
        elif _NUL.search(value):
            errors.append((path, "must not contain U+0000"))
        elif not _encodable(value):
            errors.append((path, "is not valid Unicode (unpaired surrogate)"))
        elif self._regex is not None and not self._regex.search(value):
            errors.append((path, self.mismatch or f"does not match {self.pattern}"))
        return value


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _with(out: dict[str, Any], **keywords: Any) -> dict[str, Any]:
    """``out`` with each JSON Schema keyword whose value is given (not None)."""
    out.update((name, value) for name, value in keywords.items() if value is not None)
    return out


def _out_of_bounds(
    value: float,
    minimum: float | None,
    maximum: float | None,
    exclusive_minimum: float | None = None,
    show: Any = str,
) -> str | None:
    """Why ``value`` is outside the bounds, or None."""
    if minimum is not None and value < minimum:
        return f"must be >= {show(minimum)}"
    if exclusive_minimum is not None and value <= exclusive_minimum:
        return f"must be > {show(exclusive_minimum)}"
    if maximum is not None and value > maximum:
        return f"must be <= {show(maximum)}"
    return None


def _short(number: float) -> str:
    return f"{number:g}"


@dataclass
class Number(Schema):
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: float | None = None
    description: str | None = None
    default: float | None = None
    example: float | None = None
    nullable: bool = False
    name: str | None = None

    json_type: ClassVar[str] = "number"

    def json_schema(self) -> dict[str, Any]:
        return _with(
            {"type": self.json_type},
            minimum=self.minimum,
            exclusiveMinimum=self.exclusive_minimum,
            maximum=self.maximum,
            default=self.default,
            example=self.example,
        )

    def _check(self, value: Any, path: str, errors: list[tuple[str, str]]) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | float):
            errors.append((path, f"expected a number, got {_type_name(value)}"))
            return value
        problem = (
            "must be a finite number"
            if not math.isfinite(value)
            else _out_of_bounds(
                value, self.minimum, self.maximum, self.exclusive_minimum, show=_short
            )
        )
        if problem is not None:
            errors.append((path, problem))
        return value

    def parse_text(self, text: str, path: str, errors: list[tuple[str, str]]) -> Any:
        try:
            number = float(text)
        except ValueError:
            errors.append((path, "expected a number"))
            return text
        return self.check(number, path, errors)


@dataclass
class Integer(Number):
    """A whole number (a float with no fraction is taken as one)."""

    json_type: ClassVar[str] = "integer"

    def _check(self, value: Any, path: str, errors: list[tuple[str, str]]) -> Any:
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            errors.append((path, f"expected an integer, got {_type_name(value)}"))
            return value
        problem = _out_of_bounds(value, self.minimum, self.maximum, self.exclusive_minimum)
        if problem is not None:
            errors.append((path, problem))
        return value

    def parse_text(self, text: str, path: str, errors: list[tuple[str, str]]) -> Any:
        """Query and path parameters arrive as text."""
        if not re.fullmatch(r"[+-]?[0-9]{1,20}", text):
            errors.append((path, "expected an integer"))
            return text
        return self.check(int(text), path, errors)


@dataclass
class Boolean(Schema):
    description: str | None = None
    default: bool | None = None
    nullable: bool = False
    name: str | None = None

    def json_schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "boolean"}
        if self.default is not None:
            out["default"] = self.default
        return out

    def _check(self, value: Any, path: str, errors: list[tuple[str, str]]) -> Any:
        if not isinstance(value, bool):
            errors.append((path, f"expected true or false, got {_type_name(value)}"))
        return value

    def parse_text(self, text: str, path: str, errors: list[tuple[str, str]]) -> Any:
        if text not in ("true", "false"):
            errors.append((path, "expected true or false"))
            return text
        return text == "true"


@dataclass
class Object(Schema):
    """An object with known fields. Unknown fields are refused (a typo should not pass)."""

    fields: Mapping[str, Schema] = field(default_factory=dict)
    required: tuple[str, ...] = ()
    name: str | None = None
    description: str | None = None
    additional: bool = False
    nullable: bool = False

    def _render(self, components: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": "object",
            "properties": {k: v.render(components) for k, v in self.fields.items()},
            "additionalProperties": self.additional,
        }
        if self.required:
            out["required"] = list(self.required)
        return out

    def json_schema(self) -> dict[str, Any]:
        return self._render({})

    def _check(self, value: Any, path: str, errors: list[tuple[str, str]]) -> Any:
        if not isinstance(value, dict):
            errors.append((path, f"expected an object, got {_type_name(value)}"))
            return value
        for name in self.required:
            if name not in value:
                errors.append((_pointer(path, name), "is required"))
        result = {}
        for name, item in value.items():
            schema = self.fields.get(name)
            if schema is None:
                if not self.additional:
                    errors.append((_pointer(path, name), "is not a known field"))
                continue
            result[name] = schema.check(item, _pointer(path, name), errors)
        return result


@dataclass
class Array(Schema):
    items: Schema = field(default_factory=lambda: AnyObject())
    min_items: int = 0
    max_items: int | None = None
    description: str | None = None
    nullable: bool = False
    name: str | None = None

    def _render(self, components: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "array", "items": self.items.render(components)}
        if self.min_items:
            out["minItems"] = self.min_items
        if self.max_items is not None:
            out["maxItems"] = self.max_items
        return out

    def json_schema(self) -> dict[str, Any]:
        return self._render({})

    def _check(self, value: Any, path: str, errors: list[tuple[str, str]]) -> Any:
        if not isinstance(value, list):
            errors.append((path, f"expected an array, got {_type_name(value)}"))
            return value
        if len(value) < self.min_items:
            errors.append((path, f"needs at least {self.min_items} items"))
            return value
        if self.max_items is not None and len(value) > self.max_items:
            errors.append((path, f"allows at most {self.max_items} items, got {len(value)}"))
            return value
        return [self.items.check(item, _pointer(path, i), errors) for i, item in enumerate(value)]


#: Payloads nest at most this deep: deeper JSON is refused before it reaches the database.
MAX_DEPTH = 64

#: Any JSON value whose strings, keys included, hold no U+0000: what a payload's members are.
JSON_VALUE: dict[str, Any] = {
    "description": "Any JSON value; its strings (object keys too) may not contain U+0000.",
    "anyOf": [
        {"type": "string", "pattern": NO_NUL},
        {"type": ["number", "boolean", "null"]},
        {"type": "array", "items": {"$ref": "#/components/schemas/JsonValue"}},
        {
            "type": "object",
            "propertyNames": {"pattern": NO_NUL},
            "additionalProperties": {"$ref": "#/components/schemas/JsonValue"},
        },
    ],
}


@dataclass
class AnyObject(Schema):
    """A free-form JSON object (a job payload). Its strings may not contain U+0000, and it nests
    at most ``MAX_DEPTH`` levels deep."""

    description: str | None = None
    nullable: bool = False
    name: str | None = None

    def json_schema(self) -> dict[str, Any]:
        return {"type": "object", "additionalProperties": True}

    def _render(self, components: dict[str, Any]) -> dict[str, Any]:
        components.setdefault("JsonValue", JSON_VALUE)
        return {
            "type": "object",
            "propertyNames": {"pattern": NO_NUL},
            "additionalProperties": {"$ref": "#/components/schemas/JsonValue"},
        }

    def _check(self, value: Any, path: str, errors: list[tuple[str, str]]) -> Any:
        if not isinstance(value, dict):
            errors.append((path, f"expected an object, got {_type_name(value)}"))
            return value
        problem = _json_problem(value, path, 1)
        if problem is not None:
            errors.append(problem)
        return value


@dataclass
class AnyValue(Schema):
    """Any JSON value, null included (a job's result). Its strings may not contain U+0000,
    and it nests at most ``MAX_DEPTH`` levels deep."""

    description: str | None = None
    name: str | None = None

    def json_schema(self) -> dict[str, Any]:
        return {}

    def _render(self, components: dict[str, Any]) -> dict[str, Any]:
        components.setdefault("JsonValue", JSON_VALUE)
        return {"$ref": "#/components/schemas/JsonValue"}

    def _check(self, value: Any, path: str, errors: list[tuple[str, str]]) -> Any:
        problem = _json_problem(value, path, 1)
        if problem is not None:
            errors.append(problem)
        return value


def _json_problem(value: Any, path: str, depth: int) -> tuple[str, str] | None:
    """The first string with U+0000 or an unpaired surrogate, or nesting past ``MAX_DEPTH``."""
    if depth > MAX_DEPTH:
        return path, f"nests deeper than {MAX_DEPTH} levels"
    if isinstance(value, str):
        if "\x00" in value:
            return path, "strings must not contain U+0000"
        if not _encodable(value):
            return path, "is not valid Unicode (unpaired surrogate)"
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            problem = _json_problem(key, path, depth) or _json_problem(
                item, _pointer(path, key), depth + 1
            )
            if problem is not None:
                return problem
    elif isinstance(value, list):
        for i, item in enumerate(value):
            problem = _json_problem(item, _pointer(path, i), depth + 1)
            if problem is not None:
                return problem
    return None
