"""`{% decision_panel req user as panel %}`: what templates/review/_quorum.html shows about a request's decision
policy (quorum progress, the proposed answer, the rule that decided, whether this reviewer may remember it),
computed without writing."""

from typing import Any

from django import template
from django.contrib.auth.models import User

from elicitation.queue import quorum
from elicitation.reviewer import decisions

register = template.Library()


@register.simple_tag
def decision_panel(req: Any, user: User) -> dict[str, Any]:
    return decisions.panel(req, user)


@register.filter
def approval_counts(policy: Any) -> dict[str, int] | None:
    """`{{ r.policy|approval_counts }}`: a queue row's "1 of 2 approvals", or None without a quorum."""
    return quorum.counts(policy)
