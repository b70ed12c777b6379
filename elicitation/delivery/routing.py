"""Who is told about a request, on which channel, and who is left alone for now.

A queue's `ReachRule`s say it: tier 0 on arrival, tier 1 when the request is still unclaimed at the queue's T1
(the escalation chain's first step, `transitions.notify_next_tier`). A rule reaches every member, the supervisors,
the people named on it (an on-call group), or one Slack channel; it may ask for a minimum priority. Reviewers are
left alone during their own quiet hours, read in their own time zone, and e-mail follows each one's preference
(each request, a digest, or none). A queue without any rule behaves as before this module existed: nobody is
told by e-mail or Slack on arrival; the browser counts work regardless.

Tier 2 has no rules: when a request a reviewer holds is still unanswered at T2 and the policy says `notify`
(`transitions.reassign_unanswered`), the holder and the queue's supervisors are told, on the channels the queue's
rules use (e-mail when it has none: the operator asked for the news by setting the policy).
"""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, time
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db.models import Q

from elicitation.models import (
    Audience,
    Channel,
    ElicitationRequest,
    EmailMode,
    PushSubscription,
    ReachRule,
    ReviewerReach,
)

# The notice tier of "a request you hold or supervise is still unanswered at T2" (no ReachRule has it).
HOLDER_TIER = 2


@dataclass(frozen=True)
class Recipient:
    """One addressee of one channel: a reviewer (user set) or a Slack channel (slack_channel set)."""

    channel: str
    key: str
    user: User | None = None
    slack_channel: str = ""
    # Why this recipient is held back ("quiet hours", "digest", "no e-mail address", …), or "" to send now.
    held: str = ""


def in_quiet_hours(prefs: ReviewerReach | None, now: datetime) -> bool:
    """True when `now`, read in the reviewer's time zone, falls in their quiet hours (which may span midnight)."""
    if prefs is None or prefs.quiet_start is None or prefs.quiet_end is None:
        return False
    try:
        zone = ZoneInfo(prefs.time_zone or "UTC")
    except (ZoneInfoNotFoundError, ValueError):
        zone = ZoneInfo("UTC")
    local: time = now.astimezone(zone).time()
    start, end = prefs.quiet_start, prefs.quiet_end
    if start == end:
        return False
    if start < end:
        return start <= local < end
    return local >= start or local < end


def matching_rules(request: ElicitationRequest, tier: int) -> list[ReachRule]:
    # No prefetch of `people`: `_audience` asks for a PEOPLE rule's active users itself (a query per arrival less).
    rules = ReachRule.objects.filter(queue_id=request.queue_id, tier=tier)
    return [rule for rule in rules if _applies(rule, request)]


def _applies(rule: ReachRule, request: ElicitationRequest) -> bool:
    return rule.min_priority is None or request.priority >= rule.min_priority


def _audience(rule: ReachRule, queue_id: int) -> list[Any]:
    users = get_user_model().objects.filter(is_active=True)
    if rule.audience == Audience.MEMBERS:
        users = users.filter(review_queues=queue_id)
    elif rule.audience == Audience.SUPERVISORS:
        users = users.filter(supervised_queues=queue_id)
    elif rule.audience == Audience.PEOPLE:
        users = users.filter(reach_rules=rule)
    else:
        return []
    return list(users.select_related("reach").distinct().order_by("pk"))


def _preferences(user: User) -> ReviewerReach | None:
    try:
        prefs: ReviewerReach = user.reach
    except ReviewerReach.DoesNotExist:
        return None
    return prefs


def _held(channel: str, user: User, now: datetime) -> str:
    prefs = _preferences(user)
    if channel == Channel.EMAIL:
        if not user.email:
            return "no e-mail address"
        mode = prefs.email_mode if prefs else EmailMode.EACH
        if mode == EmailMode.OFF:
            return "e-mail off"
    if channel == Channel.SLACK and not (prefs and prefs.slack_user_id):
        return "no linked Slack account"
    if channel == Channel.PUSH and not settings.WEB_PUSH_VAPID_PRIVATE_KEY:
        return "Web Push not set up"
    if channel == Channel.PUSH and not PushSubscription.objects.filter(user=user).exists():
        return "no browser subscribed to Web Push"
    if in_quiet_hours(prefs, now):
        return "quiet hours"
    if channel == Channel.EMAIL and prefs and prefs.email_mode == EmailMode.DIGEST:
        return "digest"
    return ""


def recipients(request: ElicitationRequest, tier: int, now: datetime) -> list[Recipient]:
    """Every (channel, addressee) the request's rules of this tier name, once each, with whoever is held back
    marked with why. Browser rules add nobody here: pages poll their own counts (reviewer/notifications.py)."""
    return recipients_of([request], tier, now)[request.pk]


def recipients_of(
    requests: Sequence[ElicitationRequest], tier: int, now: datetime
) -> dict[Any, list[Recipient]]:
    """`recipients` of each request (by pk), routing's reads made once per queue: the arrivals of one window
    (reach_tasks.notify_arrivals) share their queue's rules, each rule's audience and its people's preferences."""
    if tier == HOLDER_TIER:
        return {request.pk: holder_recipients(request, now) for request in requests}
    by_queue: dict[int, list[ElicitationRequest]] = {}
    for request in requests:
        by_queue.setdefault(request.queue_id, []).append(request)
    told: dict[Any, list[Recipient]] = {}
    for queue_id, arrived in by_queue.items():
        rules = [
            rule
            for rule in ReachRule.objects.filter(queue_id=queue_id, tier=tier)
            if rule.channel != Channel.BROWSER
        ]
        addressees: dict[int, list[Recipient]] = {}  # by rule, read when a request first needs it
        for request in arrived:
            found: dict[tuple[str, str], Recipient] = {}
            for rule in rules:
                if not _applies(rule, request):
                    continue
                if rule.pk not in addressees:
                    addressees[rule.pk] = _addressees(rule, queue_id, now)
                for recipient in addressees[rule.pk]:
                    found.setdefault((recipient.channel, recipient.key), recipient)
            told[request.pk] = list(found.values())
    return told


def _addressees(rule: ReachRule, queue_id: int, now: datetime) -> list[Recipient]:
    if rule.audience == Audience.SLACK_CHANNEL:
        key = f"slack:{rule.slack_channel}"
        return [Recipient(rule.channel, key, slack_channel=rule.slack_channel)]
    found = []
    for user in _audience(rule, queue_id):
        prefs = _preferences(user)
        slack_id = prefs.slack_user_id or "" if prefs else ""
        found.append(
            Recipient(
                rule.channel,
                f"user:{user.pk}",
                user=user,
                slack_channel=slack_id,
                held=_held(rule.channel, user, now),
            )
        )
    return found


def holder_recipients(request: ElicitationRequest, now: datetime) -> list[Recipient]:
    """Tier 2: the request's holder and its queue's active supervisors, on every channel beyond the browser that
    the queue's rules use (e-mail when none does), with whoever is held back marked with why. Nobody once the
    claim is gone: a released request is moved by the chain's next sweep instead. The key names the queue, so
    an arrival notice to the same person does not stand in for this one, and a second one is never sent."""
    if request.claimed_by_id is None:
        return []
    rules = ReachRule.objects.filter(queue_id=request.queue_id).exclude(channel=Channel.BROWSER)
    channels = sorted(set(rules.values_list("channel", flat=True))) or [Channel.EMAIL.value]
    people = (
        get_user_model()
        .objects.filter(is_active=True)
        .filter(Q(pk=request.claimed_by_id) | Q(supervised_queues=request.queue_id))
        .select_related("reach")
        .distinct()
        .order_by("pk")
    )
    found: list[Recipient] = []
    for channel in channels:
        for user in people:
            prefs = _preferences(user)
            found.append(
                Recipient(
                    channel,
                    f"t2:{request.queue_id}:user:{user.pk}",
                    user=user,
                    slack_channel=prefs.slack_user_id or "" if prefs else "",
                    held=_held(channel, user, now),
                )
            )
    return found
