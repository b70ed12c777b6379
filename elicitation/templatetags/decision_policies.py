"""`{% decision_panel req user as panel %}`: what templates/review/_quorum.html shows about a request's decision
policy (quorum progress, the proposed answer, the rule that decided, whether this reviewer may remember it),
computed without writing."""

from typing import Any

from django import template

from elicitation.reviewer import decisions

register = template.Library()


@register.simple_tag
def decision_panel(req: Any, user: Any) -> dict[str, Any]:
    return decisions.panel(req, user)
