"""What an answer writes when it closes a request, whoever gives it (a reviewer, a quorum, an answer rule, a
hosted flow): the outcome and the result's `_meta` with its signed receipt; and the errors of its content keyed as
API fields."""

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.contrib.auth.models import User

from elicitation.models import ElicitationRequest, Status
from elicitation.queue import receipts
from elicitation.queue.quorum import DECISION_META
from elicitation.queue.rules.facts import request_digest_of


def completion_changes(
    user: User | None,
    action: str,
    content: dict[str, Any] | None,
    now: datetime,
    *,
    request: ElicitationRequest,
    meta: Mapping[str, Any] | None = None,
    step_up: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The columns a completion writes. `meta` is the result's `_meta` as the decider gave it (a quorum's tally, the
    rule that answered); the receipt is added to it, so every completed request's result carries one. `step_up`
    is each approver's verified passkey assertion (queue/step_up.py), carried in the receipt."""
    decision = (meta or {}).get(DECISION_META)
    decision = decision if isinstance(decision, Mapping) else {}
    receipt = receipts.sign_receipt(
        request_id=request.pk,
        digest=decision.get("digest") or request_digest_of(request),
        action=action,
        approvers=_approvers(user, decision),
        rule=_rule_name(decision),
        at=now,
        step_up=step_up,
    )
    return {
        "status": Status.COMPLETED,
        "claimed_by": None,
        "lease_expires_at": None,
        "action": action,
        "content": content,
        "answered_by": user,
        "closed_at": now,
        "result_meta": {**(meta or {}), receipts.RECEIPT_META: receipt},
    }


def _approvers(user: User | None, decision: Mapping[str, Any]) -> list[str]:
    """Who decided: a quorum's approvers (or the one who vetoed), the reviewer who answered, nobody for a rule."""
    if isinstance(decision.get("vetoedBy"), str):
        return [decision["vetoedBy"]]
    if isinstance(decision.get("approvals"), list):
        return [str(approval["by"]) for approval in decision["approvals"]]
    return [user.get_username()] if user is not None else []


def _rule_name(decision: Mapping[str, Any]) -> str | None:
    rule = decision.get("rule")
    if not isinstance(rule, Mapping):
        return None
    return str(rule.get("name") or f"#{rule.get('id')}")


def content_error_fields(errors: dict[str, str]) -> dict[str, str]:
    """Answer errors keyed as API fields: `content.<question>`, or `content` for the whole object."""
    return {
        "content" + ("" if key == "$" else "." + key.removeprefix("$.")): reason
        for key, reason in errors.items()
    }
