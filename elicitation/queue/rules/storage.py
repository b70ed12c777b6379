"""Rules and policies as rows: writing them (each change bumps the queue's rules version, so cached compilations
go stale) and reading them back as a rule file's data."""

import secrets
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction

from elicitation.models import AnswerRule, ElicitationRequest, Queue, QueueMode, QueuePolicy
from elicitation.queue import clock
from elicitation.queue.errors import InvalidInput
from elicitation.queue.rules.validation import RuleSpec, parse_policy, parse_rule

# --- writing rules (each change bumps the queue's rules version, so cached compilations go stale) -------------


def policy_of(queue: Queue) -> QueuePolicy:
    policy, _ = QueuePolicy.objects.get_or_create(queue=queue)
    return policy


def new_rules_version() -> int:
    """A fresh stamp, not a counter: a queue deleted and made again (or a test database rolled back) reuses ids,
    and an incremented version could then name another queue's compiled rules."""
    return secrets.randbelow(2**31 - 2) + 1


def _bump(queue: Queue) -> None:
    policy_of(queue)
    QueuePolicy.objects.filter(queue=queue).update(rules_version=new_rules_version())


def rule_row(queue: Queue, spec: RuleSpec, position: int, user: User | None = None) -> AnswerRule:
    return AnswerRule(
        queue=queue,
        position=position,
        name=spec.name,
        enabled=spec.enabled,
        match=spec.match,
        action=spec.action,
        content=spec.content,
        route_to=spec.route_to,
        priority=spec.priority,
        deadline_seconds=spec.deadline_seconds,
        quorum=spec.quorum,
        step_up=spec.step_up,
        expires_at=spec.expires_at,
        created_by=user if user is not None and user.is_authenticated else None,
    )


def replace_policy(queue: Queue, data: Any, *, user: User | None = None) -> QueuePolicy:
    """Import a rule file: the queue's policy and rules become exactly what it says (remembered decisions stay).
    `user` writes it (None: the operator), which decides where its rules may route."""
    spec = parse_policy(data, queue=queue, user=user)
    with transaction.atomic():
        policy = policy_of(queue)
        QueuePolicy.objects.filter(pk=policy.pk).update(
            mode=spec.mode,
            unmatched=spec.unmatched,
            round_cap=spec.round_cap,
            quorum=spec.quorum,
            rules_version=new_rules_version(),
        )
        AnswerRule.objects.filter(queue=queue, remembered_from__isnull=True).delete()
        AnswerRule.objects.bulk_create(
            [rule_row(queue, rule, (index + 1) * 10, user) for index, rule in enumerate(spec.rules)]
        )
        policy.refresh_from_db()
    return policy


def add_rule(
    queue: Queue, data: Any, *, user: User | None = None, remembered_from: ElicitationRequest | None = None
) -> AnswerRule:
    """Append one rule (after the queue's last), or raise InvalidInput with field paths under `rule`."""
    spec, errors = parse_rule(data, "rule", queue=queue, user=user)
    if spec is None:
        raise InvalidInput("The rule is not valid.", errors)
    with transaction.atomic():
        last = (
            AnswerRule.objects.filter(queue=queue)
            .order_by("-position")
            .values_list("position", flat=True)
            .first()
        )
        row = rule_row(queue, spec, (last or 0) + 10, user)
        row.remembered_from = remembered_from
        row.save()
        _bump(queue)
    return row


def update_rule(rule: AnswerRule, data: Any, *, user: User | None = None) -> AnswerRule:
    """Rewrite one rule in its place, checked as `user` writes it (None: the operator)."""
    spec, errors = parse_rule(data, "rule", queue=rule.queue, user=user)
    if spec is None:
        raise InvalidInput("The rule is not valid.", errors)
    with transaction.atomic():
        fresh = rule_row(rule.queue, spec, rule.position)
        for name in (
            "name",
            "enabled",
            "match",
            "action",
            "content",
            "route_to",
            "priority",
            "deadline_seconds",
        ):
            setattr(rule, name, getattr(fresh, name))
        rule.quorum, rule.expires_at = fresh.quorum, fresh.expires_at
        rule.save()
        _bump(rule.queue)
    return rule


def revoke_rule(rule: AnswerRule) -> AnswerRule:
    """Stop a rule from deciding from now on (kept, so the audit rows that name it still point somewhere)."""
    with transaction.atomic():
        if rule.revoked_at is None:
            rule.revoked_at = clock.now()
            rule.save(update_fields=["revoked_at"])
        _bump(rule.queue)
    return rule


def delete_rule(rule: AnswerRule) -> None:
    with transaction.atomic():
        queue = rule.queue
        rule.delete()
        _bump(queue)


def rules_changed(queue: Queue) -> None:
    """For the admin, which saves rows itself: compiled copies of this queue's rules are stale now."""
    _bump(queue)


# --- reading: the policy that came with a queue, and the rule file as data ---------------------------------------


def queue_policy(queue: Queue) -> QueuePolicy | None:
    """The policy loaded with the queue (select_related("policy")), without another query when there is none."""
    return getattr(queue, "policy", None)


def rule_data(rule: AnswerRule) -> dict[str, Any]:
    data: dict[str, Any] = {"name": rule.name}
    if not rule.enabled:
        data["enabled"] = False
    if rule.match:
        data["match"] = rule.match
    data["action"] = rule.action
    if rule.content is not None:
        data["content"] = rule.content
    if rule.route_to is not None:
        data["queue"] = rule.route_to.slug
    if rule.priority is not None:
        data["priority"] = rule.priority
    if rule.deadline_seconds is not None:
        data["deadline"] = rule.deadline_seconds
    if rule.quorum is not None:
        data["quorum"] = rule.quorum
    if rule.step_up:
        data["step_up"] = rule.step_up
    if rule.expires_at is not None:
        data["expires_at"] = rule.expires_at.isoformat()
    return data


def policy_data(queue: Queue) -> dict[str, Any]:
    """The queue's rule file: policy and its own rules in order (remembered decisions are listed elsewhere)."""
    policy = QueuePolicy.objects.filter(queue=queue).first()
    data: dict[str, Any] = {
        "mode": str(policy.mode) if policy else QueueMode.HUMAN.value,
        "unmatched": policy.unmatched if policy else "decline",
        "round_cap": policy.round_cap if policy else 5,
    }
    if policy is not None and policy.quorum:
        data["quorum"] = policy.quorum
    rows = AnswerRule.objects.filter(queue=queue, remembered_from__isnull=True, revoked_at__isnull=True)
    data["rules"] = [rule_data(rule) for rule in rows.select_related("route_to").order_by("position", "id")]
    return data
