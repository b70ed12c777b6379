"""Django forms built from normalised questions: one renderer for elicitation answers and configuration forms.

`build_answer_form(questions)` turns `schemas.Question`s (or their JSON dicts) into a bound or unbound form whose
widgets carry the right HTML types and limits; `form_content(form)` turns the cleaned form back into MCP `content`.
The rules themselves stay in `schemas.py`: the form only converts text to values and reports schema errors.
"""

import datetime
import re
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Any

from django import forms
from django.forms.boundfield import BoundField
from django.utils.html import conditional_escape
from django.utils.safestring import SafeString

from elicitation.queue import schemas

# Up to this many options a single-select is a radio group (all choices visible); beyond it, a <select>.
RADIO_MAX_OPTIONS = 6
# Text answers allowed to be longer than this get a textarea.
SINGLE_LINE_MAX_LENGTH = 200
REQUIRED_MESSAGE = "This question is required."

QuestionLike = schemas.Question | Mapping[str, Any]


def _as_question(item: QuestionLike) -> schemas.Question:
    if isinstance(item, schemas.Question):
        return item
    return schemas.Question.from_dict(dict(item))


def error_sentence(reason: str) -> str:
    """Schema reasons are predicates ("must be at least 3"); shown next to a field they read as sentences."""
    if reason == "is required":
        return REQUIRED_MESSAGE
    text = reason[:1].upper() + reason[1:]
    return text if text.endswith(".") else text + "."


# --- date-time: RFC 3339 in content, <input type="datetime-local"> (no zone, read as UTC) on the page ------------

_LOCAL_DATE_TIME = re.compile(r"(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2})(:\d{2}(?:\.\d+)?)?")


def date_time_to_content(text: str) -> str:
    """`2025-06-18T12:00` from the browser becomes `2025-06-18T12:00:00Z`; text with a zone is kept as typed."""
    match = _LOCAL_DATE_TIME.fullmatch(text.strip())
    if match is None:
        return text  # already has a zone, or is not a date-time at all: schemas.py decides
    day, minutes, seconds = match.groups()
    return f"{day}T{minutes}{seconds or ':00'}Z"


def date_time_to_widget(value: Any) -> Any:
    """An RFC 3339 default or draft, shown in the UTC wall-clock form a datetime-local input accepts."""
    if not isinstance(value, str):
        return value
    try:
        parsed = datetime.datetime.fromisoformat(value.replace("z", "Z"))
    except ValueError:
        return value
    if parsed.tzinfo is not None:
        parsed = parsed.astimezone(datetime.UTC).replace(tzinfo=None)
    return parsed.isoformat(timespec="seconds")


# --- fields --------------------------------------------------------------------------------------------------------


class NumberField(forms.FloatField):
    """A JSON number: `3` stays the integer 3 (not 3.0), so the agent reads back exactly what was typed."""

    def to_python(self, value: Any) -> int | float | None:  # type: ignore[override]
        number = super().to_python(value)
        if number is None:
            return None
        text = str(value).strip()
        if re.fullmatch(r"[+-]?\d+", text) and abs(number) < 2**53:
            return int(text)
        return number


def _number_text(number: int | float) -> str:
    if isinstance(number, float) and number.is_integer():
        return str(int(number))
    return str(number)


def _limits_text(question: schemas.Question) -> str:
    low, high = question.min, question.max
    if question.kind == "text":
        unit = "characters"
    elif question.kind == "multi-select":
        unit = "choices"
    else:
        unit = ""
    if low is None and high is None:
        return ""
    if low is not None and high is not None:
        span = f"{_number_text(low)} to {_number_text(high)}"
        if low == high:
            span = _number_text(low)
    elif low is not None:
        span = f"at least {_number_text(low)}"
    else:
        assert high is not None
        span = f"at most {_number_text(high)}"
    if unit and span.rsplit(" ", 1)[-1] == "1":
        unit = unit[:-1]  # "at least 1 choice", "at most 1 character"
    if question.kind == "multi-select":
        return f"Choose {span} {unit}".rstrip() + "."
    if question.kind == "text":
        return f"{span[:1].upper() + span[1:]} {unit}."
    return (
        f"Between {span.replace(' to ', ' and ')}." if " to " in span else f"{span[:1].upper() + span[1:]}."
    )


def _text_widget(question: schemas.Question) -> forms.Widget:
    attrs: dict[str, Any] = {}
    if question.min is not None:
        attrs["minlength"] = int(question.min)
    if question.max is not None:
        attrs["maxlength"] = int(question.max)
    if question.sensitive:
        return forms.PasswordInput(attrs={**attrs, "autocomplete": "off"}, render_value=False)
    if question.format == "email":
        return forms.EmailInput(attrs={**attrs, "autocomplete": "off"})
    if question.format == "uri":
        return forms.URLInput(attrs=attrs)
    if question.format == "date":
        return forms.DateInput(attrs={**attrs, "type": "date"})
    if question.format == "date-time":
        # step=1 lets seconds be entered; the value is read as UTC (the label says so).
        return forms.DateTimeInput(attrs={**attrs, "type": "datetime-local", "step": "1"})
    if question.max is None or question.max > SINGLE_LINE_MAX_LENGTH:
        return forms.Textarea(attrs={**attrs, "rows": 3})
    return forms.TextInput(attrs=attrs)


def _number_attrs(question: schemas.Question, step: str) -> dict[str, Any]:
    attrs: dict[str, Any] = {"step": step}
    if question.min is not None:
        attrs["min"] = _number_text(question.min)
    if question.max is not None:
        attrs["max"] = _number_text(question.max)
    return attrs


def _help_text(question: schemas.Question) -> SafeString:
    """Agent text, escaped here because Django renders help_text without escaping."""
    parts = [question.description.strip(), _limits_text(question)]
    if question.kind == "text" and question.format == "date-time":
        parts.append("Time in UTC.")
    return conditional_escape(" ".join(part for part in parts if part))


YES_NO_CHOICES = [("true", "Yes"), ("false", "No")]


def needs_explicit_choice(question: schemas.Question) -> bool:
    """A required yes/no without a default: a checkbox would answer "no" for a reviewer who never chose."""
    return question.kind == "boolean" and question.required and question.default is None


class YesNoField(forms.TypedChoiceField):
    """Yes and No as two radio buttons with nothing selected: required means the reviewer picked one."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(
            choices=YES_NO_CHOICES,
            coerce=lambda value: value == "true",
            empty_value=None,
            widget=forms.RadioSelect,
            **kwargs,
        )


def build_field(question: schemas.Question) -> forms.Field:
    """The Django field for one question. Range and format rules are left to schemas.py (see AnswerForm.clean)."""
    common: dict[str, Any] = {
        "label": question.title or question.id,
        "required": question.required,
        "help_text": _help_text(question),
        "error_messages": {"required": REQUIRED_MESSAGE},
    }
    field: forms.Field
    if question.kind == "text":
        # Kept exactly as typed: the agent asked for this text, not a trimmed variant of it.
        field = forms.CharField(strip=False, widget=_text_widget(question), **common)
    elif question.kind == "number":
        field = NumberField(widget=forms.NumberInput(attrs=_number_attrs(question, "any")), **common)
    elif question.kind == "integer":
        field = forms.IntegerField(
            widget=forms.NumberInput(attrs=_number_attrs(question, "1")),
            error_messages={"required": REQUIRED_MESSAGE, "invalid": "Enter a whole number."},
            **{key: value for key, value in common.items() if key != "error_messages"},
        )
    elif question.kind == "boolean" and needs_explicit_choice(question):
        field = YesNoField(**common)
    elif question.kind == "boolean":
        # An optional or defaulted yes/no may stay a checkbox: unchecked is false, and that was a choice.
        field = forms.BooleanField(**{**common, "required": False})
    elif question.kind == "single-select":
        choices = [(option.value, option.label) for option in question.options]
        if len(choices) <= RADIO_MAX_OPTIONS:
            field = forms.ChoiceField(choices=choices, widget=forms.RadioSelect, **common)
        else:
            field = forms.ChoiceField(choices=[("", "Choose…"), *choices], widget=forms.Select, **common)
    else:
        choices = [(option.value, option.label) for option in question.options]
        field = forms.MultipleChoiceField(choices=choices, widget=forms.CheckboxSelectMultiple, **common)
    field.widget.attrs["data-question"] = question.id
    field.widget.attrs["data-kind"] = question.kind
    return field


def widget_initial(question: schemas.Question, value: Any) -> Any:
    """A content-shaped value (a default or a shared draft) as the widget expects it."""
    if value is None:
        return None
    if question.kind == "text" and question.format == "date-time":
        return date_time_to_widget(value)
    if needs_explicit_choice(question):
        return "true" if value is True else "false" if value is False else None
    if question.kind == "multi-select":
        return list(value) if isinstance(value, list | tuple) else [value]
    return value


# --- HTML ids: question ids are agent-chosen (any script, spaces, quotes), HTML ids are derived from them ---------

_PLAIN_DOM_ID = re.compile(r"[A-Za-z0-9_-]+")


def question_dom_ids(question_ids: Iterable[str]) -> dict[str, str]:
    """An HTML-id-safe stand-in for each question id, unique within the form.

    A plain id (letters, digits, `_`, `-`) stays itself, so `full_name` is `#q-full_name`. Any other becomes an
    ASCII slug (`città` → `citta`, `a b` → `a-b`; `question` when nothing is left), numbered when it would clash
    with a plain id or an earlier slug. Field *names* keep the question id exactly: that is the answer's key.
    """
    ids = list(question_ids)
    taken = {question_id for question_id in ids if _PLAIN_DOM_ID.fullmatch(question_id)}
    dom_ids: dict[str, str] = {}
    for question_id in ids:
        if _PLAIN_DOM_ID.fullmatch(question_id):
            dom_ids[question_id] = question_id
            continue
        ascii_text = unicodedata.normalize("NFKD", question_id).encode("ascii", "ignore").decode("ascii")
        base = re.sub(r"[^A-Za-z0-9_-]+", "-", ascii_text).strip("-") or "question"
        candidate, number = base, 2
        while candidate in taken:
            candidate, number = f"{base}-{number}", number + 1
        taken.add(candidate)
        dom_ids[question_id] = candidate
    return dom_ids


class QuestionBoundField(BoundField):
    """A field whose HTML ids (input, label, help and error text, radio options) come from the question's safe
    DOM id rather than from its name, which is the agent's property name verbatim."""

    @property
    def dom_id(self) -> str:
        dom_ids: dict[str, str] = getattr(self.form, "dom_ids", {})
        return dom_ids.get(self.name) or question_dom_ids([self.name])[self.name]

    @property
    def auto_id(self) -> str:
        auto_id = self.form.auto_id
        if not auto_id:
            return ""
        name = self.form.add_prefix(self.dom_id)
        return str(auto_id) % name if "%s" in str(auto_id) else name


class AnswerForm(forms.Form):
    """A form whose fields are questions. `is_valid()` checks the answers with schemas.py, the one rulebook."""

    bound_field_class = QuestionBoundField
    questions: dict[str, schemas.Question]
    dom_ids: dict[str, str]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        # Only questions whose text converted cleanly are checked; the others already carry an error.
        convertible = [question for question in self.questions.values() if question.id not in self.errors]
        content = content_from_cleaned(convertible, cleaned)
        try:
            schemas.validate_content(convertible, content)
        except schemas.AnswerInvalid as exc:
            apply_answer_errors(self, exc.errors)
        return cleaned


def build_answer_form(
    questions: Iterable[QuestionLike],
    data: Mapping[str, Any] | None = None,
    initial: Mapping[str, Any] | None = None,
    *,
    prefix: str | None = None,
    disabled: bool = False,
) -> AnswerForm:
    """A form for these questions. `initial` is content-shaped (MCP values) and wins over schema defaults."""
    parsed = [_as_question(item) for item in questions]
    form = AnswerForm(data=data, prefix=prefix)
    form.questions = {question.id: question for question in parsed}
    form.dom_ids = question_dom_ids(form.questions)
    values: dict[str, Any] = {}
    for question in parsed:
        field = build_field(question)
        field.disabled = disabled
        form.fields[question.id] = field
        start = initial.get(question.id) if initial and question.id in initial else question.default
        if start is not None:
            values[question.id] = widget_initial(question, start)
    form.initial = values
    return form


def content_from_cleaned(questions: Iterable[schemas.Question], cleaned: Mapping[str, Any]) -> dict[str, Any]:
    content: dict[str, Any] = {}
    for question in questions:
        if question.id not in cleaned:
            continue
        value = cleaned[question.id]
        if question.kind == "boolean" and value is not None:
            content[question.id] = bool(value)
        elif value is None or value == "" or value == []:
            continue  # unanswered
        elif question.kind == "text" and question.format == "date-time":
            content[question.id] = date_time_to_content(value)
        elif question.kind == "multi-select":
            content[question.id] = list(value)
        else:
            content[question.id] = value
    return content


def form_content(form: AnswerForm) -> dict[str, Any]:
    """The answered questions of a validated form, in MCP `content` shape (string, number, boolean, string[])."""
    if not hasattr(form, "cleaned_data"):
        raise ValueError("form_content needs a form on which is_valid() was called")
    return content_from_cleaned(form.questions.values(), form.cleaned_data)


def apply_answer_errors(form: forms.Form, errors: Mapping[str, str]) -> None:
    """Put answer errors next to their fields. Keys are question ids, `$.<key>`/`$`, or the API's `content.<id>`."""
    for key, reason in errors.items():
        # A question id is free text ("contentType", "$price"): an exact match wins over prefix stripping.
        name = key
        if key not in form.fields:
            name = key.removeprefix("content").removeprefix(".").removeprefix("$").removeprefix(".")
        message = error_sentence(reason)
        if name in form.fields:
            if name not in form.errors or message not in form.errors[name]:
                form.add_error(name, message)
        else:
            form.add_error(None, f"{name}: {message}" if name else message)
