"""`{{ r|outcome }}`: what was decided about a request, in the reviewer's words (Approved, Rejected, Declined, the
answers), for rows that list many requests (History, queue rows). Computed by the presenter, without writing."""

from typing import Any

from django import template

from elicitation.reviewer import presenters

register = template.Library()


@register.filter
def outcome(req: Any) -> presenters.Outcome | None:
    return presenters.outcome(req)
