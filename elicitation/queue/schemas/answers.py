"""Validating answers against the questions: a whole `ElicitResult.content` or one answer, values never coerced;
every problem is worded as what to send instead."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from elicitation.queue.schemas.questions import DEFAULT_LIMITS, Option, Question, SchemaLimits
from elicitation.queue.schemas.text_formats import format_problem


class AnswerInvalid(Exception):
    """The answers do not fit the questions; `errors` maps question id (or "$", "$.<key>") to a reason."""

    def __init__(self, errors: dict[str, str]) -> None:
        self.errors = errors
        shown = "; ".join(f"{key}: {reason}" for key, reason in list(errors.items())[:3])
        more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
        super().__init__(f"invalid answer: {shown}{more}")


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
        reason = answer_problem(question, content[question.id], limits)
        if reason is None:
            cleaned[question.id] = content[question.id]
        else:
            errors[question.id] = reason
    if errors:
        raise AnswerInvalid(errors)
    return cleaned


def validate_answer(question: Question, value: Any, *, limits: SchemaLimits = DEFAULT_LIMITS) -> Any:
    """Check one answer; return it unchanged or raise AnswerInvalid({question.id: reason})."""
    reason = answer_problem(question, value, limits)
    if reason is not None:
        raise AnswerInvalid({question.id: reason})
    return value


def answer_problem(question: Question, value: Any, limits: SchemaLimits) -> str | None:
    """Why `value` does not answer `question`, or None when it does (defaults are checked with it too)."""
    return _ANSWER_CHECKS[question.kind](question, value, limits)


def is_finite_number(value: Any) -> bool:
    """A number JSON can carry: an int or a finite float, never a bool."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return isinstance(value, int) or math.isfinite(value)


def _text_problem(question: Question, value: Any, limits: SchemaLimits) -> str | None:
    if not isinstance(value, str):
        return "must be a string"
    longest = limits.max_text_answer_length
    if question.max is not None:
        longest = min(longest, int(question.max))
    if question.min is not None and len(value) < question.min:
        return f"must be at least {counted(int(question.min), 'character')}"
    if len(value) > longest:
        return f"must be at most {counted(longest, 'character')}"
    if question.format is not None:
        return format_problem(question.format, value)
    return None


def _number_problem(question: Question, value: Any, limits: SchemaLimits) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "must be a number"
    if not is_finite_number(value):
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
        return f"must have at least {counted(int(question.min), 'choice')}"
    if question.max is not None and len(value) > question.max:
        return f"must have at most {counted(int(question.max), 'choice')}"
    return None


_ANSWER_CHECKS: dict[str, Callable[[Question, Any, SchemaLimits], str | None]] = {
    "text": _text_problem,
    "number": _number_problem,
    "integer": _integer_problem,
    "boolean": _boolean_problem,
    "single-select": _single_select_problem,
    "multi-select": _multi_select_problem,
}


def counted(amount: int, noun: str) -> str:
    """'1 character', '3 characters'."""
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
