"""MCP elicitation `requestedSchema`s: parse them into form questions and validate the answers.

Built on the official MCP definitions of revisions 2025-06-18, 2025-11-25 and 2026-07-28, shipped beside this
module in `mcp_elicitation_schema.json`: each property is checked by a JSON Schema validator (jsonschema-rs)
against the definition it is read as (`StringSchema`, `NumberSchema`, ..., `TitledMultiSelectEnumSchema`), so
what MCP accepts is accepted, with ReviewHub's size limits and a few stricter rules on top (listed in the
README); every problem keeps its JSON path. Free of Django on purpose: the API, the reviewer UI and background jobs all share these rules.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema_rs
from jsonschema import FormatChecker

QUESTION_KINDS = ("text", "number", "integer", "boolean", "single-select", "multi-select")
TEXT_FORMATS = ("email", "uri", "date", "date-time")

# Property names are kept exactly as sent; this bound is the drafts table's column width.
MAX_PROPERTY_NAME_LENGTH = 64


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

# The official MCP definitions, shipped with the package (see the file's description for source and revisions).
_SPEC_FILE = Path(__file__).with_name("mcp_elicitation_schema.json")
_SPEC: dict[str, Any] = json.loads(_SPEC_FILE.read_text(encoding="utf-8"))
_REGISTRY = jsonschema_rs.Registry([(_SPEC["$id"], _SPEC)])
MCP_REVISIONS = ("2025-06-18", "2025-11-25", "2026-07-28")
# Problems are explained against the newest revision's definition of the variant a property is read as.
_NEWEST = f"mcp-{MCP_REVISIONS[-1]}"


def _spec_node(pointer: str) -> dict[str, Any]:
    node: Any = _SPEC
    for part in pointer.split("/"):
        node = node[part]
    assert isinstance(node, dict)
    return node


def _spec_validator(uri: str) -> jsonschema_rs.Validator:
    # jsonschema_rs, not jsonschema: 50 properties of 200 options cost 260 ms in pure Python (README, dependencies).
    return jsonschema_rs.validator_for({"$ref": uri}, registry=_REGISTRY)


def _newest_definition(name: str) -> jsonschema_rs.Validator:
    return _spec_validator(f"urn:mcp:schema:{MCP_REVISIONS[-1]}#/$defs/{name}")


_UNION_REQUESTED_SCHEMA = _spec_validator(f"{_SPEC['$id']}#/$defs/requestedSchema")
_NEWEST_REQUESTED_SCHEMA = _newest_definition("ElicitRequestFormParams/properties/requestedSchema")

# How ReviewHub reads a property, and the MCP definition each reading is checked against.
_VARIANT_DEFINITIONS = {
    "text": "StringSchema",
    "number": "NumberSchema",
    "integer": "NumberSchema",
    "boolean": "BooleanSchema",
    "enum-select": "UntitledSingleSelectEnumSchema",
    "legacy-select": "LegacyTitledEnumSchema",
    "titled-select": "TitledSingleSelectEnumSchema",
    "multi-select": "UntitledMultiSelectEnumSchema",
    "titled-multi-select": "TitledMultiSelectEnumSchema",
}
_VARIANT_VALIDATORS = {variant: _newest_definition(name) for variant, name in _VARIANT_DEFINITIONS.items()}


def _declared_keys(name: str) -> frozenset[str]:
    return frozenset(_spec_node(f"$defs/{_NEWEST}/$defs/{name}")["properties"])


# A keyword the definition does not declare is refused: ReviewHub could not enforce it (the MCP definitions
# leave undeclared keywords open, so this is one of ReviewHub's stricter rules).
_VARIANT_KEYS = {variant: _declared_keys(name) for variant, name in _VARIANT_DEFINITIONS.items()}
_MULTI_SELECT_ITEM_KEYS = frozenset(
    _spec_node(f"$defs/{_NEWEST}/$defs/UntitledMultiSelectEnumSchema/properties/items")["properties"]
)
# A redundant "type": "string" beside anyOf is what generators emit; it is checked, not refused.
_TITLED_ITEM_KEYS = frozenset(
    _spec_node(f"$defs/{_NEWEST}/$defs/TitledMultiSelectEnumSchema/properties/items")["properties"]
) | {"type"}
_OPTION_KEYS = frozenset(
    _spec_node(f"$defs/{_NEWEST}/$defs/TitledSingleSelectEnumSchema/properties/oneOf/items")["properties"]
)
# `title`, `description` and `additionalProperties: false` are what zod and pydantic emit for a model; the
# last changes nothing here, since unknown answer keys are refused anyway. Any other value is refused.
_ROOT_KEYS = frozenset(
    _spec_node(f"$defs/{_NEWEST}/$defs/ElicitRequestFormParams/properties/requestedSchema")["properties"]
) | {"title", "description", "additionalProperties"}
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


def mcp_spec_accepts(schema: Any) -> bool:
    """Whether any MCP revision ReviewHub speaks accepts this `requestedSchema`, ReviewHub's own rules aside."""
    try:
        return bool(_UNION_REQUESTED_SCHEMA.is_valid(schema))
    except (ValueError, OverflowError):  # not JSON at all (a non-string key)
        return False


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


def _is_number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return isinstance(value, int) or math.isfinite(value)


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
        if not _UNION_REQUESTED_SCHEMA.is_valid(shallow):
            self.spec_check(_NEWEST_REQUESTED_SCHEMA, shallow, "$")
        self.check_references(schema, "$")
        self.check_keys(schema, "$", _ROOT_KEYS, "requestedSchema")
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
        allowed = _VARIANT_KEYS[variant]
        if variant == "text" and self.allow_sensitive:
            allowed = allowed | {"sensitive"}
        self.check_keys(definition, path, allowed, _VARIANT_NAMES[variant])
        self.check_nested_keys(variant, definition, path)
        if not self.spec_check(_VARIANT_VALIDATORS[variant], definition, path):
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
                self.check_keys(items, items_path, _TITLED_ITEM_KEYS, "multi-select items")
                if "type" in items and items["type"] != "string":
                    self.report(f"{items_path}.type", 'must be "string"')
                options, options_path = items.get("anyOf"), f"{items_path}.anyOf"
            else:
                self.check_keys(items, items_path, _MULTI_SELECT_ITEM_KEYS, "multi-select items")
        if isinstance(options, list):
            for index, option in enumerate(options):
                if isinstance(option, dict):
                    self.check_references(option, f"{options_path}[{index}]")
                    self.check_keys(option, f"{options_path}[{index}]", _OPTION_KEYS, "an option")

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
                f"{path}.default", f"must be at most {_count(self.limits.max_string_length, 'character')}"
            )
            return question
        reason = _answer_problem(question, default, self.limits)
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
        if not _is_number(number):
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
