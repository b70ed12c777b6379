"""Schema defaults for accepted answers (MCP SEP-1034 client-side defaults), the same on every surface.

The browser form prefills a question's `default`, so an answer from the page carries it; an answer through the
reviewer API, Slack or a script that leaves the question out would not. `fill_defaults` adds it, as the prefilled
form would have sent it — unless the reviewer explicitly skipped that question (a skipped draft), which stays
omitted. A default that does not validate on its own is left out rather than blocking the answer."""

from collections.abc import Iterable, Sequence
from typing import Any

from elicitation.models import DraftState, ElicitationRequest
from elicitation.queue import schemas


def skipped_ids(request: ElicitationRequest) -> set[str]:
    return set(request.drafts.filter(state=DraftState.SKIPPED).values_list("question_id", flat=True))


def fill_defaults(questions: Sequence[schemas.Question], content: Any, skipped: Iterable[str] = ()) -> Any:
    if not isinstance(content, dict):
        return content  # validation reports the shape
    left_out = set(skipped)
    filled = dict(content)
    for question in questions:
        if question.id in filled or question.id in left_out or question.default is None:
            continue
        value = list(question.default) if isinstance(question.default, tuple) else question.default
        try:
            schemas.validate_content([question], {question.id: value})
        except schemas.AnswerInvalid:
            continue
        filled[question.id] = value
    return filled
