"""Parsing a `requestedSchema` into questions: each property is read as one MCP definition and checked against it;
ReviewHub's size limits and stricter rules come on top. Every problem is reported with its JSON path."""

from __future__ import annotations

import dataclasses
import json
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import jsonschema_rs

from elicitation.queue.schemas.answers import answer_problem, counted, is_finite_number
from elicitation.queue.schemas.mcp_definitions import (
    MULTI_SELECT_ITEM_KEYS,
    NEWEST_REQUESTED_SCHEMA,
    OPTION_KEYS,
    ROOT_KEYS,
    TITLED_ITEM_KEYS,
    UNION_REQUESTED_SCHEMA,
    VARIANT_KEYS,
    VARIANT_VALIDATORS,
)
from elicitation.queue.schemas.questions import DEFAULT_LIMITS, Option, Question, SchemaLimits

# Property names are kept exactly as sent; this bound is the drafts table's column width.
MAX_PROPERTY_NAME_LENGTH = 64


class SchemaInvalid(Exception):
    """The requested schema is outside the MCP subset or these limits; `errors` lists every problem."""

    def __init__(self, errors: list[dict[str, str]]) -> None:
        self.errors = errors
        shown = "; ".join(f"{error['path']}: {error['reason']}" for error in errors[:3])
        more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
        super().__init__(f"invalid requestedSchema: {shown}{more}")


_REFERENCE_REASONS = {
    "$ref": "references are not supported; inline the schema",
    "$defs": "definitions are not supported; inline the schema",
    "definitions": "definitions are not supported; inline the schema",
}
_PROPERTY_TYPES = ("string", "number", "integer", "boolean", "array")
_VARIANT_NAMES = {
    "text": "a text question",
    "number": "a number question",
    "integer": "an integer question",
    "boolean": "a boolean question",
    "enum-select": "a single-select question",
    "legacy-select": "a single-select question",
    "titled-select": "a single-select question",
    "multi-select": "a multi-select question",
    "titled-multi-select": "a multi-select question",
}
_MISSING = object()

# Reasons for a value of the wrong JSON type, by the keyword it was given for: each states the whole rule,
# ReviewHub's stricter part included, so one message says what to send.
_TYPE_WORDS = {
    "string": "a string",
    "number": "a number",
    "integer": "an integer",
    "boolean": "true or false",
    "object": "an object",
    "array": "an array",
}
_TYPE_REASONS_BY_KEYWORD = {
    "minLength": "must be a non-negative integer",
    "maxLength": "must be a non-negative integer",
    "minItems": "must be a non-negative integer",
    "maxItems": "must be a non-negative integer",
    "enum": "must be a non-empty array",
    "oneOf": "must be a non-empty array",
    "anyOf": "must be a non-empty array",
    "enumNames": "must be an array of strings",
    "required": "must be an array of property names",
}
# Property names may be any non-empty string (the MCP definitions allow every one), except for characters that a
# browser's form encoding or the database would change or refuse: controls (CR/LF are rewritten in form field
# names, NUL is refused by PostgreSQL) and lone surrogates (not encodable as UTF-8).
_UNFIT_NAME_CATEGORIES = frozenset({"Cc", "Cs"})


def parse_requested_schema(
    schema: Any, *, limits: SchemaLimits = DEFAULT_LIMITS, allow_sensitive: bool = False
) -> list[Question]:
    """Turn an MCP `requestedSchema` into questions, or raise SchemaInvalid listing every problem.

    Each property is read as one MCP definition (StringSchema, NumberSchema, ..., TitledMultiSelectEnumSchema)
    and checked against it by a JSON Schema validator; ReviewHub's size limits and stricter rules come on top.
    """
    parser = _SchemaParser(limits=limits, allow_sensitive=allow_sensitive)
    questions = parser.parse_root(schema)
    if parser.problems:
        raise SchemaInvalid(sorted(parser.problems, key=lambda problem: problem["path"]))
    return questions


def _key_path(parent: str, key: Any) -> str:
    if isinstance(key, str) and re.fullmatch(r"[A-Za-z0-9_.\-$]+", key):
        return f"{parent}.{key}"
    if isinstance(key, int) and not isinstance(key, bool):
        return f"{parent}[{key}]"
    text = key if isinstance(key, str) else str(key)
    # Readable for names in any script; escaped where a character would not print (controls, surrogates).
    return f"{parent}[{json.dumps(text, ensure_ascii=not text.isprintable())}]"


def _json_path(parent: str, location: Iterable[Any]) -> str:
    path = parent
    for key in location:
        path = _key_path(path, key)
    return path


def _spec_reason(error: jsonschema_rs.ValidationError, location: list[Any]) -> str:
    kind = error.kind
    if isinstance(kind, jsonschema_rs.ValidationErrorKind.Type):
        last = location[-1] if location else None
        if isinstance(last, str) and last in _TYPE_REASONS_BY_KEYWORD:
            return _TYPE_REASONS_BY_KEYWORD[last]
        if isinstance(last, int) and len(location) >= 2 and location[-2] in ("oneOf", "anyOf"):
            return "must be an object with const and title"
        return "must be " + " or ".join(_TYPE_WORDS.get(name, name) for name in kind.types)
    if isinstance(kind, jsonschema_rs.ValidationErrorKind.Constant):
        return f"must be {json.dumps(kind.expected_value)}"
    if isinstance(kind, jsonschema_rs.ValidationErrorKind.Enum):
        return "must be one of: " + ", ".join(str(value) for value in kind.options)
    return str(error.message)  # no keyword of today's MCP definitions reaches this


# Where the definition finds several problems at one path, the most telling one is shown: "must be one of: …"
# says more than "must be a string".
_REASON_PRIORITY = {"required": 0, "const": 1, "enum": 1}


@dataclass
class _SchemaParser:
    limits: SchemaLimits
    allow_sensitive: bool
    problems: list[dict[str, str]] = field(default_factory=list)
    reported: set[str] = field(default_factory=set)

    def report(self, path: str, reason: str) -> None:
        # One reason per path: the first found (the MCP definition's, when it has one) says what to fix.
        if path not in self.reported:
            self.reported.add(path)
            self.problems.append({"path": path, "reason": reason})

    def spec_check(self, validator: jsonschema_rs.Validator, instance: Any, path: str) -> bool:
        """Report where `instance` breaks the MCP definition; True when it fits. Defaults are left to
        `with_default`, which words them as the answer they stand for."""
        try:
            errors = list(validator.iter_errors(instance))
        except (ValueError, OverflowError):  # not JSON (a non-string key): only Python callers can send it
            self.report(path, "must be JSON")
            return False
        found: dict[str, tuple[int, str]] = {}
        for error in errors:
            location = list(error.instance_path)
            if location[:1] == ["default"] and path != "$":
                continue
            if isinstance(error.kind, jsonschema_rs.ValidationErrorKind.Required):
                found[_json_path(path, [*location, error.kind.property])] = (0, "is required")
                continue
            priority = _REASON_PRIORITY.get(error.kind.name, 2)
            error_path = _json_path(path, location)
            if error_path not in found or priority < found[error_path][0]:
                found[error_path] = (priority, _spec_reason(error, location))
        for error_path, (_, reason) in found.items():
            self.report(error_path, reason)
        return not found

    # --- root ---------------------------------------------------------------------------------------

    def parse_root(self, schema: Any) -> list[Question]:
        if not isinstance(schema, dict):
            self.report("$", "must be an object")
            return []
        # Properties are checked one by one below, each against the definition it is read as.
        properties = schema.get("properties", _MISSING)
        shallow = {**schema, "properties": {}} if isinstance(properties, dict) else schema
        if not UNION_REQUESTED_SCHEMA.is_valid(shallow):
            self.spec_check(NEWEST_REQUESTED_SCHEMA, shallow, "$")
        self.check_references(schema, "$")
        self.check_keys(schema, "$", ROOT_KEYS, "requestedSchema")
        for key in ("$schema", "title", "description"):
            if key in schema:
                self.check_string(schema[key], _key_path("$", key))
        if schema.get("additionalProperties", False) is not False:
            self.report("$.additionalProperties", "may only be false")
        if isinstance(properties, dict) and len(properties) > self.limits.max_properties:
            # Not parsing each one keeps the work bounded for hostile input.
            self.report("$.properties", f"must have at most {self.limits.max_properties} properties")
            return []
        known = set(properties) if isinstance(properties, dict) else None
        required = self.required_names(schema.get("required"), known)
        questions = []
        for name, definition in properties.items() if isinstance(properties, dict) else ():
            question = self.parse_property(name, definition, name in required)
            if question is not None:
                questions.append(question)
        return questions

    def required_names(self, names: Any, known_names: set[str] | None) -> set[str]:
        if not isinstance(names, list):
            return set()  # absent, or reported against the MCP definition
        if len(names) > self.limits.max_properties:
            self.report("$.required", f"must list at most {self.limits.max_properties} names")
            return set()
        seen: set[str] = set()
        for index, name in enumerate(names):
            path = f"$.required[{index}]"
            if not isinstance(name, str):
                continue  # reported against the MCP definition
            if name in seen:
                self.report(path, "is listed more than once")
            else:
                seen.add(name)
                if known_names is not None and name not in known_names:
                    self.report(path, "is not a property of this schema")
        return seen

    # --- properties ---------------------------------------------------------------------------------

    def parse_property(self, name: str, definition: Any, required: bool) -> Question | None:
        path = _key_path("$.properties", name)
        name_is_valid = self.check_property_name(name, path)
        variant = self.property_variant(definition, path)
        if isinstance(definition, dict):
            self.check_references(definition, path)
        if variant is None:
            return None
        allowed = VARIANT_KEYS[variant]
        if variant == "text" and self.allow_sensitive:
            allowed = allowed | {"sensitive"}
        self.check_keys(definition, path, allowed, _VARIANT_NAMES[variant])
        self.check_nested_keys(variant, definition, path)
        if not self.spec_check(VARIANT_VALIDATORS[variant], definition, path):
            return None
        question = self.build_question(variant, name, definition, path, required)
        return question if name_is_valid else None

    def check_property_name(self, name: str, path: str) -> bool:
        if 0 < len(name) <= MAX_PROPERTY_NAME_LENGTH and not any(
            unicodedata.category(character) in _UNFIT_NAME_CATEGORIES for character in name
        ):
            return True
        self.report(
            path, f"must be 1-{MAX_PROPERTY_NAME_LENGTH} characters, none of them a control character"
        )
        return False

    def property_variant(self, definition: Any, path: str) -> str | None:
        """Which MCP definition the property is read as, from the keywords each one requires."""
        if not isinstance(definition, dict):
            self.report(path, "must be an object")
            return None
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
            return self.array_variant(definition, path)
        else:
            return kind
        return None

    def string_variant(self, definition: dict[str, Any], path: str) -> str | None:
        if "enum" in definition and "oneOf" in definition:
            self.report(path, "must list options in either enum or oneOf, not both")
            return None
        if "enum" in definition:
            return "legacy-select" if "enumNames" in definition else "enum-select"
        if "oneOf" in definition:
            return "titled-select"
        return "text"

    def array_variant(self, definition: dict[str, Any], path: str) -> str | None:
        items = definition.get("items")
        if not isinstance(items, dict):
            return "multi-select"  # the definition reports the missing or malformed items
        if "anyOf" in items:
            return "titled-multi-select"
        if "enum" in items:
            return "multi-select"
        self.check_references(items, f"{path}.items")
        if items.get("type") == "object":
            self.report(f"{path}.items.type", "nested objects are not supported")
        else:
            self.report(
                f"{path}.items", "arrays are only supported as multi-selects: list options in enum or anyOf"
            )
        return None

    def check_nested_keys(self, variant: str, definition: dict[str, Any], path: str) -> None:
        """References and unknown keywords inside items and options, whatever else is wrong there."""
        options_key = "oneOf" if variant == "titled-select" else None
        options: Any = definition.get("oneOf") if options_key else None
        options_path = f"{path}.oneOf"
        items = definition.get("items")
        if variant in ("multi-select", "titled-multi-select") and isinstance(items, dict):
            items_path = f"{path}.items"
            self.check_references(items, items_path)
            if variant == "titled-multi-select":
                self.check_keys(items, items_path, TITLED_ITEM_KEYS, "multi-select items")
                if "type" in items and items["type"] != "string":
                    self.report(f"{items_path}.type", 'must be "string"')
                options, options_path = items.get("anyOf"), f"{items_path}.anyOf"
            else:
                self.check_keys(items, items_path, MULTI_SELECT_ITEM_KEYS, "multi-select items")
        if isinstance(options, list):
            for index, option in enumerate(options):
                if isinstance(option, dict):
                    self.check_references(option, f"{options_path}[{index}]")
                    self.check_keys(option, f"{options_path}[{index}]", OPTION_KEYS, "an option")

    # --- questions: the definition fits, ReviewHub's limits and stricter rules remain ------------------

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
            "legacy-select": self.enum_select_question,
            "titled-select": self.titled_select_question,
            "multi-select": self.multi_select_question,
            "titled-multi-select": self.multi_select_question,
        }[variant]
        shaped = build(question, definition, path)
        if shaped is None:
            return None
        return self.with_default(shaped, definition, path)

    def text_question(self, base: Question, definition: dict[str, Any], path: str) -> Question | None:
        low, high = self.length_bounds(definition, path)
        sensitive = definition.get("sensitive", False)
        if not isinstance(sensitive, bool):
            self.report(f"{path}.sensitive", "must be true or false")
            sensitive = False
        return dataclasses.replace(
            base, kind="text", format=definition.get("format"), min=low, max=high, sensitive=sensitive
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
        items = definition["items"]
        if "anyOf" in items:
            options = self.titled_options(items["anyOf"], f"{path}.items.anyOf")
        else:
            values = self.enum_values(items["enum"], f"{path}.items.enum")
            options = None if values is None else tuple(Option(value=value, label=value) for value in values)
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

    # --- option lists -------------------------------------------------------------------------------

    def option_list(self, entries: list[Any], path: str) -> bool:
        if not entries:
            self.report(path, "must be a non-empty array")
            return False
        if len(entries) > self.limits.max_options:
            self.report(path, f"must have at most {self.limits.max_options} options")
            return False
        return True

    def enum_values(self, entries: list[str], path: str) -> list[str] | None:
        if not self.option_list(entries, path):
            return None
        fitting = [self.check_string(entry, f"{path}[{index}]") for index, entry in enumerate(entries)]
        unique = self.check_unique([(entry, f"{path}[{index}]") for index, entry in enumerate(entries)])
        return entries if unique and all(fitting) else None

    def enum_names(self, names: list[str], path: str, values: list[str] | None) -> list[str] | None:
        fitting = [self.check_string(name, f"{path}[{index}]") for index, name in enumerate(names)]
        if not all(fitting):
            return None
        if values is not None and len(names) != len(values):
            self.report(path, f"must have one name per enum value ({len(values)})")
            return None
        return names

    def titled_options(self, entries: list[dict[str, str]], path: str) -> tuple[Option, ...] | None:
        if not self.option_list(entries, path):
            return None
        fitting = [
            self.check_string(entry[key], f"{path}[{index}].{key}")
            for index, entry in enumerate(entries)
            for key in ("const", "title")
        ]
        unique = self.check_unique(
            [(entry["const"], f"{path}[{index}].const") for index, entry in enumerate(entries)]
        )
        if not (unique and all(fitting)):
            return None
        return tuple(Option(value=entry["const"], label=entry["title"]) for entry in entries)

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
                f"{path}.default", f"must be at most {counted(self.limits.max_string_length, 'character')}"
            )
            return question
        reason = answer_problem(question, default, self.limits)
        if reason is not None:
            self.report(f"{path}.default", reason)
            return question
        return dataclasses.replace(question, default=tuple(default) if isinstance(default, list) else default)

    def count_keyword(self, definition: dict[str, Any], path: str, key: str) -> int | None:
        """An integer the definition already checked (3.0 counts, as in JSON Schema); ReviewHub wants >= 0."""
        if key not in definition:
            return None
        value = int(definition[key])
        if value < 0:
            self.report(f"{path}.{key}", "must be a non-negative integer")
            return None
        return value

    def number_keyword(
        self, definition: dict[str, Any], path: str, key: str, *, integral: bool
    ) -> int | float | None:
        if key not in definition:
            return None
        number: int | float = definition[key]
        if not is_finite_number(number):
            self.report(f"{path}.{key}", "must be a number")  # NaN or an infinity
            return None
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
            self.report(path, f"must be at most {counted(self.limits.max_string_length, 'character')}")
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
