"""MCP elicitation `requestedSchema`s: parse them into form questions and validate the answers.

Accepts exactly the restricted JSON Schema subset that MCP allows in its 2025-06-18, 2025-11-25 and
2026-07-28 revisions (`PrimitiveSchemaDefinition` for each property). Pure Python on purpose: the API,
the reviewer UI and background jobs all share these rules and none of them should need Django for it.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from jsonschema import FormatChecker

QUESTION_KINDS = ("text", "number", "integer", "boolean", "single-select", "multi-select")
TEXT_FORMATS = ("email", "uri", "date", "date-time")

MAX_PROPERTY_NAME_LENGTH = 64
# Property names become HTML form field names and JSON paths, so they stay in a plain alphabet.
PROPERTY_NAME_PATTERN = re.compile(r"[A-Za-z0-9_.\-]+")


@dataclass(frozen=True)
class Option:
    value: str
    label: str


@dataclass(frozen=True)
class Question:
    id: str
    kind: str
    title: str
    description: str
    required: bool
    format: str | None
    min: int | float | None
    max: int | float | None
    # A tuple for multi-selects so the question stays immutable and hashable; to_dict() gives a list.
    default: Any
    options: tuple[Option, ...]
    sensitive: bool = False

    def __post_init__(self) -> None:
        if self.kind not in QUESTION_KINDS:
            raise ValueError(f"unknown question kind {self.kind!r}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "title": self.title,
            "description": self.description,
            "required": self.required,
            "format": self.format,
            "min": self.min,
            "max": self.max,
            "default": list(self.default) if isinstance(self.default, tuple) else self.default,
            "options": [{"value": option.value, "label": option.label} for option in self.options],
            "sensitive": self.sensitive,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Question:
        default = data.get("default")
        if isinstance(default, list):
            default = tuple(default)
        return cls(
            id=data["id"],
            kind=data["kind"],
            title=data.get("title", data["id"]),
            description=data.get("description", ""),
            required=bool(data.get("required", False)),
            format=data.get("format"),
            min=data.get("min"),
            max=data.get("max"),
            default=default,
            options=tuple(
                Option(value=item["value"], label=item["label"]) for item in data.get("options", [])
            ),
            sensitive=bool(data.get("sensitive", False)),
        )


@dataclass(frozen=True)
class SchemaLimits:
    max_properties: int = 50
    max_options: int = 200
    max_string_length: int = 10_000
    max_text_answer_length: int = 10_000


DEFAULT_LIMITS = SchemaLimits()


class SchemaInvalid(Exception):
    """The requested schema is outside the MCP subset or these limits; `errors` lists every problem."""

    def __init__(self, errors: list[dict[str, str]]) -> None:
        self.errors = errors
        shown = "; ".join(f"{error['path']}: {error['reason']}" for error in errors[:3])
        more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
        super().__init__(f"invalid requestedSchema: {shown}{more}")


class AnswerInvalid(Exception):
    """The answers do not fit the questions; `errors` maps question id (or "$", "$.<key>") to a reason."""

    def __init__(self, errors: dict[str, str]) -> None:
        self.errors = errors
        shown = "; ".join(f"{key}: {reason}" for key, reason in list(errors.items())[:3])
        more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
        super().__init__(f"invalid answer: {shown}{more}")


# ---------------------------------------------------------------------------------------------------
# Parsing requestedSchema
# ---------------------------------------------------------------------------------------------------

# `additionalProperties: false` is what zod and pydantic emit for closed objects; it changes nothing here,
# since unknown answer keys are rejected anyway. Any other value is refused.
_ROOT_KEYS = frozenset(
    {"type", "properties", "required", "$schema", "title", "description", "additionalProperties"}
)
_REFERENCE_REASONS = {
    "$ref": "references are not supported; inline the schema",
    "$defs": "definitions are not supported; inline the schema",
    "definitions": "definitions are not supported; inline the schema",
}
_PROPERTY_TYPES = ("string", "number", "integer", "boolean", "array")

# Property variants, mirroring the MCP definitions; "sensitive" is added for text when enabled.
_BASE_KEYS = frozenset({"type", "title", "description", "default"})
_VARIANT_KEYS = {
    "text": _BASE_KEYS | {"minLength", "maxLength", "format"},
    "number": _BASE_KEYS | {"minimum", "maximum"},
    "integer": _BASE_KEYS | {"minimum", "maximum"},
    "boolean": _BASE_KEYS,
    "enum-select": _BASE_KEYS | {"enum", "enumNames"},
    "titled-select": _BASE_KEYS | {"oneOf"},
    "multi-select": _BASE_KEYS | {"items", "minItems", "maxItems"},
}
_VARIANT_NAMES = {
    "text": "a text question",
    "number": "a number question",
    "integer": "an integer question",
    "boolean": "a boolean question",
    "enum-select": "a single-select question",
    "titled-select": "a single-select question",
    "multi-select": "a multi-select question",
}
_MISSING = object()


def parse_requested_schema(
    schema: Any, *, limits: SchemaLimits = DEFAULT_LIMITS, allow_sensitive: bool = False
) -> list[Question]:
    """Turn an MCP `requestedSchema` into questions, or raise SchemaInvalid listing every problem."""
    parser = _SchemaParser(limits=limits, allow_sensitive=allow_sensitive)
    questions = parser.parse_root(schema)
    if parser.problems:
        raise SchemaInvalid(sorted(parser.problems, key=lambda problem: problem["path"]))
    return questions


def _key_path(parent: str, key: Any) -> str:
    if isinstance(key, str) and re.fullmatch(r"[A-Za-z0-9_.\-$]+", key):
        return f"{parent}.{key}"
    return f"{parent}[{json.dumps(key if isinstance(key, str) else str(key))}]"


def _is_number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return isinstance(value, int) or math.isfinite(value)


def _is_non_negative_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


@dataclass
class _SchemaParser:
    limits: SchemaLimits
    allow_sensitive: bool
    problems: list[dict[str, str]] = field(default_factory=list)

    def report(self, path: str, reason: str) -> None:
        self.problems.append({"path": path, "reason": reason})

    # --- root ---------------------------------------------------------------------------------------

    def parse_root(self, schema: Any) -> list[Question]:
        if not isinstance(schema, dict):
            self.report("$", "must be an object")
            return []
        self.check_references(schema, "$")
        self.check_keys(schema, "$", _ROOT_KEYS, "requestedSchema")
        if "type" not in schema:
            self.report("$.type", "is required")
        elif schema["type"] != "object":
            self.report("$.type", 'must be "object"')
        for key in ("$schema", "title", "description"):
            if key in schema:
                self.check_string(schema[key], _key_path("$", key))
        if schema.get("additionalProperties", False) is not False:
            self.report("$.additionalProperties", "may only be false")
        properties = self.root_properties(schema)
        required = self.required_names(schema, None if properties is None else set(properties))
        questions = []
        for name, definition in (properties or {}).items():
            question = self.parse_property(name, definition, name in required)
            if question is not None:
                questions.append(question)
        return questions

    def root_properties(self, schema: dict[str, Any]) -> dict[str, Any] | None:
        properties = schema.get("properties", _MISSING)
        if properties is _MISSING:
            self.report("$.properties", "is required")
            return None
        if not isinstance(properties, dict):
            self.report("$.properties", "must be an object")
            return None
        if len(properties) > self.limits.max_properties:
            # Not parsing each one keeps the work bounded for hostile input.
            self.report("$.properties", f"must have at most {self.limits.max_properties} properties")
            return None
        return properties

    def required_names(self, schema: dict[str, Any], known_names: set[str] | None) -> set[str]:
        if "required" not in schema:
            return set()
        names = schema["required"]
        if not isinstance(names, list):
            self.report("$.required", "must be an array of property names")
            return set()
        if len(names) > self.limits.max_properties:
            self.report("$.required", f"must list at most {self.limits.max_properties} names")
            return set()
        seen: set[str] = set()
        for index, name in enumerate(names):
            path = f"$.required[{index}]"
            if not isinstance(name, str):
                self.report(path, "must be a string")
            elif name in seen:
                self.report(path, "is listed more than once")
            else:
                seen.add(name)
                if known_names is not None and name not in known_names:
                    self.report(path, "is not a property of this schema")
        return seen

    # --- properties ---------------------------------------------------------------------------------

    def parse_property(self, name: Any, definition: Any, required: bool) -> Question | None:
        path = _key_path("$.properties", name)
        name_is_valid = self.check_property_name(name, path)
        if not isinstance(definition, dict):
            self.report(path, "must be an object")
            return None
        self.check_references(definition, path)
        variant = self.property_variant(definition, path)
        if variant is None:
            return None
        allowed = _VARIANT_KEYS[variant]
        if variant == "text" and self.allow_sensitive:
            allowed = allowed | {"sensitive"}
        self.check_keys(definition, path, allowed, _VARIANT_NAMES[variant])
        question = self.build_question(variant, name if name_is_valid else "", definition, path, required)
        return question if name_is_valid else None

    def check_property_name(self, name: Any, path: str) -> bool:
        if (
            isinstance(name, str)
            and 0 < len(name) <= MAX_PROPERTY_NAME_LENGTH
            and PROPERTY_NAME_PATTERN.fullmatch(name)
        ):
            return True
        self.report(
            path,
            f"must be 1-{MAX_PROPERTY_NAME_LENGTH} characters of letters, digits, '_', '.' or '-'",
        )
        return False

    def property_variant(self, definition: dict[str, Any], path: str) -> str | None:
        type_path = f"{path}.type"
        kind = definition.get("type", _MISSING)
        if kind is _MISSING:
            self.report(type_path, "is required")
        elif kind == "object":
            self.report(type_path, "nested objects are not supported")
        elif not isinstance(kind, str) or kind not in _PROPERTY_TYPES:
            self.report(type_path, f"must be one of: {', '.join(_PROPERTY_TYPES)}")
        elif kind == "string":
            return self.string_variant(definition, path)
        elif kind == "array":
            return "multi-select"
        else:
            return kind
        return None

    def string_variant(self, definition: dict[str, Any], path: str) -> str | None:
        if "enum" in definition and "oneOf" in definition:
            self.report(path, "must list options in either enum or oneOf, not both")
            return None
        if "enum" in definition:
            return "enum-select"
        if "oneOf" in definition:
            return "titled-select"
        return "text"

    def build_question(
        self, variant: str, name: str, definition: dict[str, Any], path: str, required: bool
    ) -> Question | None:
        title = self.optional_string(definition, path, "title")
        description = self.optional_string(definition, path, "description")
        question = Question(
            id=name,
            kind="text",
            title=title or name,
            description=description or "",
            required=required,
            format=None,
            min=None,
            max=None,
            default=None,
            options=(),
        )
        build = {
            "text": self.text_question,
            "number": self.number_question,
            "integer": self.number_question,
            "boolean": self.boolean_question,
            "enum-select": self.enum_select_question,
            "titled-select": self.titled_select_question,
            "multi-select": self.multi_select_question,
        }[variant]
        shaped = build(question, definition, path)
        if shaped is None:
            return None
        return self.with_default(shaped, definition, path)

    def text_question(self, base: Question, definition: dict[str, Any], path: str) -> Question | None:
        low, high = self.length_bounds(definition, path)
        text_format = definition.get("format")
        if text_format is not None and text_format not in TEXT_FORMATS:
            self.report(f"{path}.format", f"must be one of: {', '.join(TEXT_FORMATS)}")
            text_format = None
        sensitive = definition.get("sensitive", False)
        if not isinstance(sensitive, bool):
            self.report(f"{path}.sensitive", "must be true or false")
            sensitive = False
        return dataclasses.replace(
            base, kind="text", format=text_format, min=low, max=high, sensitive=sensitive
        )

    def length_bounds(self, definition: dict[str, Any], path: str) -> tuple[int | None, int | None]:
        low = self.count_keyword(definition, path, "minLength")
        high = self.count_keyword(definition, path, "maxLength")
        longest = self.limits.max_text_answer_length
        for key, value in (("minLength", low), ("maxLength", high)):
            if value is not None and value > longest:
                self.report(f"{path}.{key}", f"must be at most {longest}")
        if low is not None and high is not None and low > high:
            self.report(f"{path}.minLength", "must not be greater than maxLength")
        return low, high

    def number_question(self, base: Question, definition: dict[str, Any], path: str) -> Question | None:
        kind = definition["type"]
        low = self.number_keyword(definition, path, "minimum", integral=kind == "integer")
        high = self.number_keyword(definition, path, "maximum", integral=kind == "integer")
        if low is not None and high is not None and low > high:
            self.report(f"{path}.minimum", "must not be greater than maximum")
        return dataclasses.replace(base, kind=kind, min=low, max=high)

    def boolean_question(self, base: Question, definition: dict[str, Any], path: str) -> Question | None:
        return dataclasses.replace(base, kind="boolean")

    def enum_select_question(self, base: Question, definition: dict[str, Any], path: str) -> Question | None:
        values = self.enum_values(definition["enum"], f"{path}.enum")
        labels = values
        if "enumNames" in definition:
            labels = self.enum_names(definition["enumNames"], f"{path}.enumNames", values)
        if values is None or labels is None:
            return None
        options = tuple(Option(value=value, label=label) for value, label in zip(values, labels, strict=True))
        return dataclasses.replace(base, kind="single-select", options=options)

    def titled_select_question(
        self, base: Question, definition: dict[str, Any], path: str
    ) -> Question | None:
        options = self.titled_options(definition["oneOf"], f"{path}.oneOf")
        if options is None:
            return None
        return dataclasses.replace(base, kind="single-select", options=options)

    def multi_select_question(self, base: Question, definition: dict[str, Any], path: str) -> Question | None:
        options = self.multi_select_options(definition, path)
        low = self.count_keyword(definition, path, "minItems")
        high = self.count_keyword(definition, path, "maxItems")
        if low is not None and high is not None and low > high:
            self.report(f"{path}.minItems", "must not be greater than maxItems")
        if options is not None and low is not None and low > len(options):
            self.report(
                f"{path}.minItems", f"must not be greater than the number of options ({len(options)})"
            )
        if options is None:
            return None
        return dataclasses.replace(base, kind="multi-select", options=options, min=low, max=high)

    def multi_select_options(self, definition: dict[str, Any], path: str) -> tuple[Option, ...] | None:
        items_path = f"{path}.items"
        items = definition.get("items", _MISSING)
        if items is _MISSING:
            self.report(items_path, "is required")
            return None
        if not isinstance(items, dict):
            self.report(items_path, "must be an object")
            return None
        self.check_references(items, items_path)
        if "anyOf" in items:
            # The MCP definition only requires anyOf; a redundant "type": "string" is harmless.
            self.check_keys(items, items_path, frozenset({"anyOf", "type"}), "multi-select items")
            if "type" in items and items["type"] != "string":
                self.report(f"{items_path}.type", 'must be "string"')
            return self.titled_options(items["anyOf"], f"{items_path}.anyOf")
        if "enum" in items:
            self.check_keys(items, items_path, frozenset({"enum", "type"}), "multi-select items")
            if items.get("type") != "string":
                self.report(f"{items_path}.type", 'must be "string"')
            values = self.enum_values(items["enum"], f"{items_path}.enum")
            return None if values is None else tuple(Option(value=value, label=value) for value in values)
        if items.get("type") == "object":
            self.report(f"{items_path}.type", "nested objects are not supported")
        else:
            self.report(
                items_path, "arrays are only supported as multi-selects: list options in enum or anyOf"
            )
        return None

    # --- option lists -------------------------------------------------------------------------------

    def option_list(self, raw: Any, path: str) -> list[Any] | None:
        if not isinstance(raw, list) or not raw:
            self.report(path, "must be a non-empty array")
            return None
        if len(raw) > self.limits.max_options:
            self.report(path, f"must have at most {self.limits.max_options} options")
            return None
        return raw

    def enum_values(self, raw: Any, path: str) -> list[str] | None:
        entries = self.option_list(raw, path)
        if entries is None:
            return None
        valid = [(entry, f"{path}[{index}]") for index, entry in enumerate(entries)]
        valid = [(entry, entry_path) for entry, entry_path in valid if self.check_string(entry, entry_path)]
        unique = self.check_unique(valid)
        return [entry for entry, _ in valid] if unique and len(valid) == len(entries) else None

    def enum_names(self, raw: Any, path: str, values: list[str] | None) -> list[str] | None:
        if not isinstance(raw, list):
            self.report(path, "must be an array of strings")
            return None
        names = [name for index, name in enumerate(raw) if self.check_string(name, f"{path}[{index}]")]
        if len(names) != len(raw):
            return None
        if values is not None and len(names) != len(values):
            self.report(path, f"must have one name per enum value ({len(values)})")
            return None
        return names

    def titled_options(self, raw: Any, path: str) -> tuple[Option, ...] | None:
        entries = self.option_list(raw, path)
        if entries is None:
            return None
        options = [self.titled_option(entry, f"{path}[{index}]") for index, entry in enumerate(entries)]
        valid = [
            (option, f"{path}[{index}].const") for index, option in enumerate(options) if option is not None
        ]
        unique = self.check_unique([(option.value, option_path) for option, option_path in valid])
        return tuple(option for option, _ in valid) if unique and len(valid) == len(entries) else None

    def titled_option(self, entry: Any, path: str) -> Option | None:
        if not isinstance(entry, dict):
            self.report(path, "must be an object with const and title")
            return None
        self.check_references(entry, path)
        self.check_keys(entry, path, frozenset({"const", "title"}), "an option")
        fields_ok = True
        for key in ("const", "title"):
            if key not in entry:
                self.report(f"{path}.{key}", "is required")
                fields_ok = False
            elif not self.check_string(entry[key], f"{path}.{key}"):
                fields_ok = False
        return Option(value=entry["const"], label=entry["title"]) if fields_ok else None

    def check_unique(self, values_with_paths: list[tuple[str, str]]) -> bool:
        seen: set[str] = set()
        unique = True
        for value, path in values_with_paths:
            if value in seen:
                self.report(path, "duplicates an earlier option")
                unique = False
            seen.add(value)
        return unique

    # --- keywords -----------------------------------------------------------------------------------

    def with_default(self, question: Question, definition: dict[str, Any], path: str) -> Question:
        if "default" not in definition:
            return question
        default = definition["default"]
        if question.kind == "integer" and isinstance(default, float) and default.is_integer():
            default = int(default)  # JSON Schema treats 3.0 as an integer; store it as one.
        if isinstance(default, str) and len(default) > self.limits.max_string_length:
            self.report(
                f"{path}.default", f"must be at most {_count(self.limits.max_string_length, 'character')}"
            )
            return question
        reason = _answer_problem(question, default, self.limits)
        if reason is not None:
            self.report(f"{path}.default", reason)
            return question
        return dataclasses.replace(question, default=tuple(default) if isinstance(default, list) else default)

    def count_keyword(self, definition: dict[str, Any], path: str, key: str) -> int | None:
        if key not in definition:
            return None
        value = definition[key]
        if not _is_non_negative_int(value):
            self.report(f"{path}.{key}", "must be a non-negative integer")
            return None
        return int(value)

    def number_keyword(
        self, definition: dict[str, Any], path: str, key: str, *, integral: bool
    ) -> int | float | None:
        if key not in definition:
            return None
        value = definition[key]
        if not _is_number(value):
            self.report(f"{path}.{key}", "must be a number")
            return None
        number: int | float = value
        if integral and isinstance(number, float):
            if not number.is_integer():
                self.report(f"{path}.{key}", "must be an integer")
                return None
            return int(number)  # JSON Schema treats 3.0 as an integer; store it as one.
        return number

    def optional_string(self, definition: dict[str, Any], path: str, key: str) -> str | None:
        if key not in definition or not self.check_string(definition[key], f"{path}.{key}"):
            return None
        text: str = definition[key]
        return text

    def check_string(self, value: Any, path: str) -> bool:
        if not isinstance(value, str):
            self.report(path, "must be a string")
            return False
        if len(value) > self.limits.max_string_length:
            self.report(path, f"must be at most {_count(self.limits.max_string_length, 'character')}")
            return False
        return True

    def check_references(self, definition: dict[str, Any], path: str) -> None:
        for key, reason in _REFERENCE_REASONS.items():
            if key in definition:
                self.report(_key_path(path, key), reason)

    def check_keys(self, definition: dict[str, Any], path: str, allowed: Iterable[str], where: str) -> None:
        allowed = frozenset(allowed)
        for key in definition:
            if key in allowed or key in _REFERENCE_REASONS:
                continue
            if key == "sensitive" and self.allow_sensitive:
                self.report(_key_path(path, key), "is only allowed on text questions")
            else:
                self.report(_key_path(path, key), f"is not allowed on {where}")


# ---------------------------------------------------------------------------------------------------
# Validating answers
# ---------------------------------------------------------------------------------------------------

_SHOWN_OPTIONS = 10
_SHOWN_OPTION_LENGTH = 40


def validate_content(
    questions: Sequence[Question], content: Any, *, limits: SchemaLimits = DEFAULT_LIMITS
) -> dict[str, Any]:
    """Check a whole `ElicitResult.content`; return only the answered questions, values untouched."""
    if not isinstance(content, dict):
        raise AnswerInvalid({"$": "must be an object"})
    known_ids = {question.id for question in questions}
    errors = {f"$.{key}": "is not a question in this form" for key in content if key not in known_ids}
    cleaned: dict[str, Any] = {}
    for question in questions:
        if question.id not in content:
            if question.required:
                errors[question.id] = "is required"
            continue
        reason = _answer_problem(question, content[question.id], limits)
        if reason is None:
            cleaned[question.id] = content[question.id]
        else:
            errors[question.id] = reason
    if errors:
        raise AnswerInvalid(errors)
    return cleaned


def validate_answer(question: Question, value: Any, *, limits: SchemaLimits = DEFAULT_LIMITS) -> Any:
    """Check one answer; return it unchanged or raise AnswerInvalid({question.id: reason})."""
    reason = _answer_problem(question, value, limits)
    if reason is not None:
        raise AnswerInvalid({question.id: reason})
    return value


def questions_to_json(questions: Iterable[Question]) -> list[dict[str, Any]]:
    return [question.to_dict() for question in questions]


def questions_from_json(data: Iterable[dict[str, Any]]) -> list[Question]:
    return [Question.from_dict(item) for item in data]


def _answer_problem(question: Question, value: Any, limits: SchemaLimits) -> str | None:
    return _ANSWER_CHECKS[question.kind](question, value, limits)


def _text_problem(question: Question, value: Any, limits: SchemaLimits) -> str | None:
    if not isinstance(value, str):
        return "must be a string"
    longest = limits.max_text_answer_length
    if question.max is not None:
        longest = min(longest, int(question.max))
    if question.min is not None and len(value) < question.min:
        return f"must be at least {_count(int(question.min), 'character')}"
    if len(value) > longest:
        return f"must be at most {_count(longest, 'character')}"
    if question.format is not None and not _FORMAT_CHECKS[question.format](value):
        return _FORMAT_REASONS[question.format]
    return None


def _number_problem(question: Question, value: Any, limits: SchemaLimits) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "must be a number"
    if not _is_number(value):
        return "must be a finite number"
    return _range_problem(question, value)


def _integer_problem(question: Question, value: Any, limits: SchemaLimits) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return "must be an integer"
    return _range_problem(question, value)


def _range_problem(question: Question, value: int | float) -> str | None:
    if question.min is not None and value < question.min:
        return f"must be at least {_number_text(question.min)}"
    if question.max is not None and value > question.max:
        return f"must be at most {_number_text(question.max)}"
    return None


def _boolean_problem(question: Question, value: Any, limits: SchemaLimits) -> str | None:
    return None if isinstance(value, bool) else "must be true or false"


def _single_select_problem(question: Question, value: Any, limits: SchemaLimits) -> str | None:
    if isinstance(value, str) and any(option.value == value for option in question.options):
        return None
    return f"must be {_one_of(question.options)}"


def _multi_select_problem(question: Question, value: Any, limits: SchemaLimits) -> str | None:
    if not isinstance(value, list):
        return "must be a list of choices"
    allowed = {option.value for option in question.options}
    if not all(isinstance(choice, str) and choice in allowed for choice in value):
        return f"must only contain choices that are {_one_of(question.options)}"
    if len(set(value)) != len(value):
        return "must not contain the same choice twice"
    if question.min is not None and len(value) < question.min:
        return f"must have at least {_count(int(question.min), 'choice')}"
    if question.max is not None and len(value) > question.max:
        return f"must have at most {_count(int(question.max), 'choice')}"
    return None


_ANSWER_CHECKS: dict[str, Callable[[Question, Any, SchemaLimits], str | None]] = {
    "text": _text_problem,
    "number": _number_problem,
    "integer": _integer_problem,
    "boolean": _boolean_problem,
    "single-select": _single_select_problem,
    "multi-select": _multi_select_problem,
}


def _count(amount: int, noun: str) -> str:
    return f"{amount} {noun}" if amount == 1 else f"{amount} {noun}s"


def _number_text(number: int | float) -> str:
    if isinstance(number, float) and number.is_integer() and abs(number) < 1e15:
        return str(int(number))
    return str(number)


def _one_of(options: Sequence[Option]) -> str:
    if len(options) > _SHOWN_OPTIONS:
        return f"one of the {len(options)} listed options"
    return "one of: " + ", ".join(_shortened(option.value) for option in options)


def _shortened(text: str) -> str:
    return text if len(text) <= _SHOWN_OPTION_LENGTH else text[: _SHOWN_OPTION_LENGTH - 3] + "..."


# --- text formats ----------------------------------------------------------------------------------

_FORMAT_CHECKER = FormatChecker()
if not {"uri", "date-time"} <= set(_FORMAT_CHECKER.checkers):
    # Without these jsonschema silently accepts anything; refuse to run rather than fail open.
    raise ImportError(
        "elicitation.queue.schemas needs jsonschema[format-nongpl] for uri and date-time checks"
    )

# One "@", a non-empty local part, a dotted domain with non-empty labels, no whitespace or controls.
_EMAIL_PATTERN = re.compile(r"[^@\s\x00-\x1f\x7f]+@[^@\s\x00-\x1f\x7f.]+(?:\.[^@\s\x00-\x1f\x7f.]+)+")
_DATE_PATTERN = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
# The checkers' own regexes end in "$", which lets a trailing newline through.
_WHITESPACE_OR_CONTROL = re.compile(r"[\s\x00-\x1f\x7f]")


def _is_email(value: str) -> bool:
    return _EMAIL_PATTERN.fullmatch(value) is not None


def _is_uri(value: str) -> bool:
    return not _WHITESPACE_OR_CONTROL.search(value) and _FORMAT_CHECKER.conforms(value, "uri")


def _is_date(value: str) -> bool:
    if _DATE_PATTERN.fullmatch(value) is None:
        return False
    try:
        datetime.date.fromisoformat(value)
    except ValueError:
        return False
    return True


def _is_date_time(value: str) -> bool:
    return not _WHITESPACE_OR_CONTROL.search(value) and _FORMAT_CHECKER.conforms(value, "date-time")


_FORMAT_CHECKS: dict[str, Callable[[str], bool]] = {
    "email": _is_email,
    "uri": _is_uri,
    "date": _is_date,
    "date-time": _is_date_time,
}
_FORMAT_REASONS = {
    "email": "must be a valid email address",
    "uri": "must be a valid absolute URI, such as https://example.com",
    "date": "must be a valid date (YYYY-MM-DD)",
    "date-time": "must be a valid date-time (RFC 3339 with a timezone, e.g. 2025-06-18T12:00:00Z)",
}
