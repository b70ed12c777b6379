"""Which queues a company account reviews and supervises: its provider's groups claim, read at every sign-in.

A group named `<OIDC_GROUP_PREFIX><queue-slug>` (the prefix is `reviewhub:` unless set) makes the account a member of
that queue, `<OIDC_GROUP_PREFIX><queue-slug>:supervisor` its supervisor; OIDC_GROUP_QUEUES maps other group names
(an Entra ID group's object id, say) to `<queue-slug>` or `<queue-slug>:supervisor` the same way.

An account that signs in through the provider has its memberships and supervision managed by the provider alone:
each sign-in sets them to exactly what its groups say, so a group removed at the provider is access removed at the
next sign-in, and a queue an admin added the account to by hand is dropped then too. A missing or malformed claim
counts as no groups (access is removed, never kept on a doubt). Groups naming no existing queue are ignored: queues
are never created from a claim. Staff status is neither given nor taken.
"""

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser

from elicitation.models import Queue

logger = logging.getLogger(__name__)

SUPERVISOR_SUFFIX = ":supervisor"


@dataclass(frozen=True)
class QueueGrants:
    member_of: frozenset[str]
    supervisor_of: frozenset[str]


def groups_in_claims(claims: Mapping[str, Any], claim: str) -> list[str]:
    value = claims.get(claim)
    if isinstance(value, str):  # some providers send a lone group as a string
        return [value]
    if isinstance(value, list) and all(isinstance(group, str) for group in value):
        return value
    if value is not None:
        logger.warning("the %r claim is not a list of group names; treated as no groups", claim)
    return []


def queue_grants(groups: Iterable[str], *, prefix: str, mapping: Mapping[str, Sequence[str]]) -> QueueGrants:
    """The queues `groups` grant: `<prefix><slug>` or a mapped group → member, with `:supervisor` → supervisor."""
    member_of: set[str] = set()
    supervisor_of: set[str] = set()
    for group in groups:
        targets = list(mapping.get(group, ()))
        if prefix and group.startswith(prefix):
            targets.append(group[len(prefix) :])
        for target in targets:
            if target.endswith(SUPERVISOR_SUFFIX):
                supervisor_of.add(target.removesuffix(SUPERVISOR_SUFFIX))
            else:
                member_of.add(target)
    return QueueGrants(frozenset(member_of), frozenset(supervisor_of))


def apply_queue_grants(user: AbstractBaseUser, grants: QueueGrants) -> None:
    """Set the account's memberships and supervision to exactly `grants` (inside the sign-in's transaction)."""
    account: Any = user
    member_queues = list(Queue.objects.filter(slug__in=grants.member_of))
    supervised_queues = list(Queue.objects.filter(slug__in=grants.supervisor_of))
    unknown = (grants.member_of | grants.supervisor_of) - {
        queue.slug for queue in member_queues + supervised_queues
    }
    if unknown:
        logger.info("company sign-in: groups name queues that do not exist: %s", ", ".join(sorted(unknown)))
    before = (
        set(account.review_queues.values_list("slug", flat=True)),
        set(account.supervised_queues.values_list("slug", flat=True)),
    )
    account.review_queues.set(member_queues)
    account.supervised_queues.set(supervised_queues)
    after = ({queue.slug for queue in member_queues}, {queue.slug for queue in supervised_queues})
    if before != after:
        # What the provider changed, for the operator asking why someone can or cannot see a queue.
        logger.info(
            "company sign-in: %s now reviews [%s] and supervises [%s] (was [%s] and [%s])",
            account.get_username(),
            ", ".join(sorted(after[0])),
            ", ".join(sorted(after[1])),
            ", ".join(sorted(before[0])),
            ", ".join(sorted(before[1])),
        )
