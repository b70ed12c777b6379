"""What a `requestedSchema` becomes: questions (with their options and defaults), the limits a schema and its
answers are held to, and the questions' JSON form, stored on the request row."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

QUESTION_KINDS = ("text", "number", "integer", "boolean", "single-select", "multi-select")
TEXT_FORMATS = ("email", "uri", "date", "date-time")


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


def questions_to_json(questions: Iterable[Question]) -> list[dict[str, Any]]:
    return [question.to_dict() for question in questions]


def questions_from_json(data: Iterable[dict[str, Any]]) -> list[Question]:
    return [Question.from_dict(item) for item in data]
