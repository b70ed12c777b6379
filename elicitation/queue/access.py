"""Who may touch which queue: every access rule of the app, for pages, the reviewer API, sockets and flows.

Rules answer with the domain's errors (a missing row and another team's row look different only to those allowed
to see the difference); each surface maps those errors once (api/errors.py, reviewer/errors.py, …)."""

import functools
from typing import Any
from uuid import UUID

from django.contrib.auth.models import AnonymousUser, User
from django.core.exceptions import ValidationError
from django.db import connection
from django.db.models import Exists, OuterRef, Q, QuerySet

from elicitation.models import Agent, ElicitationRequest, Queue
from elicitation.queue import prebuilt_sql
from elicitation.queue.errors import AccessDenied, NotFoundError


def can_review(user: User | AnonymousUser | None, queue: Queue) -> bool:
    if not user or not user.is_authenticated:
        return False
    if user.is_staff:
        return True
    return queue.members.filter(pk=user.pk).exists() or queue.supervisors.filter(pk=user.pk).exists()


def can_supervise(user: User | AnonymousUser | None, queue: Queue) -> bool:
    if not user or not user.is_authenticated:
        return False
    return bool(user.is_staff) or queue.supervisors.filter(pk=user.pk).exists()


def can_remember_decisions(user: User | AnonymousUser, queue: Queue) -> bool:
    """Turning an answer into a remembered decision (a rule that answers later requests): supervisors, and
    reviewers of the queue given the `remember_decision` permission."""
    if not can_review(user, queue):
        return False
    return can_supervise(user, queue) or bool(user.has_perm("elicitation.remember_decision"))


def reviewer_queues(user: User) -> QuerySet[Queue]:
    """Every queue the reviewer may see, each once (a member who also supervises is not counted twice)."""
    if user.is_staff:
        return Queue.objects.all()
    return Queue.objects.filter(Q(members=user) | Q(supervisors=user)).distinct()


def metrics_queues(user: User | AnonymousUser | None) -> QuerySet[Queue]:
    """The queues whose metrics a user may see: staff see every queue; a supervisor the queues they supervise."""
    if not user or not user.is_authenticated:
        return Queue.objects.none()
    if user.is_staff:
        return Queue.objects.all()
    return Queue.objects.filter(supervisors=user)


def can_view_metrics(user: User | AnonymousUser | None) -> bool:
    return bool(user and user.is_authenticated and (user.is_staff or metrics_queues(user).exists()))


def reviewable_queue(user: User | AnonymousUser | None, slug: str) -> Queue:
    queue = Queue.objects.filter(slug=slug).first()
    if queue is None:
        raise NotFoundError("No such queue.")
    if not can_review(user, queue):
        raise AccessDenied("You are not a reviewer of this queue.")
    return queue


def reviewable_request(user: User | AnonymousUser | None, request_id: UUID | str) -> ElicitationRequest:
    found = (
        ElicitationRequest.objects.select_related("queue", "agent", "claimed_by", "answered_by")
        .filter(pk=request_id)
        .first()
    )
    if found is None:
        raise NotFoundError("No such request.")
    check_reviewer(found, user)
    return found


def check_reviewer(request: ElicitationRequest, user: User | AnonymousUser | None) -> None:
    if not can_review(user, request.queue):
        raise AccessDenied("You are not a reviewer of this queue.")


def check_supervisor(queue: Queue, user: User | AnonymousUser | None) -> None:
    if not can_supervise(user, queue):
        raise AccessDenied("Only a queue supervisor can do that.")


# What an agent's view of a request reads besides its row: the queue's slug, the owner's key, the claimant.
AGENT_VIEW_RELATIONS = ("queue", "agent", "claimed_by")


def request_with_relations(request_id: UUID | str) -> ElicitationRequest | None:
    """The request with its queue, agent and holder, or None. Its SQL is built once per process
    (queue/prebuilt_sql.py): every agent GET (so every ended long-poll) and every reviewer action reads it, and the
    ORM took longer to build this join than the database to run it (BENCHMARKS.md, #3 long-poll)."""
    found = prebuilt_sql.get_with_related(ElicitationRequest, request_id, AGENT_VIEW_RELATIONS)
    return None if found is None else found[0]


def owned_request(agent_id: int, request_id: UUID | str) -> ElicitationRequest:
    """An agent sees only its own requests; another agent's id is indistinguishable from a missing one."""
    try:
        found = request_with_relations(request_id)
    except (ValueError, TypeError, ValidationError):
        found = None
    if found is None or found.agent_id != agent_id:
        raise NotFoundError("No such request.")
    return found


def postable_queue_by_id(agent_id: int, queue_id: int) -> Queue | None:
    """The queue if the agent may post to it (one of its key's queues: the rule intake's `postable_queue` reads
    by slug), with its policy loaded; None otherwise. A `route` rule moves a request only where its agent could
    have posted it: another team's queue is not reached through one's own queue's rules."""
    return Queue.objects.select_related("policy").filter(pk=queue_id, agents=agent_id).first()


def agent_may_post(agent_id: int, slug: str) -> bool:
    """Whether `slug` names one of the agent's key's queues (the rule of intake's `postable_queue`), without reading
    the queue: the MCP gateway's door asks it on every request. The statement is the ORM's, built once per process:
    building it took three times as long as running it (BENCHMARKS.md, #13 gateway overhead)."""
    with connection.cursor() as cursor:
        cursor.execute(_may_post_sql(connection.vendor), [agent_id, slug])
        return cursor.fetchone() is not None


def agent_by_key_prefix(prefix: str, may_post_to: str) -> tuple[Agent, bool] | None:
    """The agent whose key has this prefix, and `agent_may_post(agent, may_post_to)`, in one statement (the key
    itself is checked by the caller, `keys.agent_for_key_posting_to`); None if no agent has the prefix."""
    sql, params = _agent_may_post_sql(connection.vendor)
    values: dict[Any, Any] = {"<slug>": may_post_to, "<prefix>": prefix}
    with connection.cursor() as cursor:
        cursor.execute(sql, [values.get(param, param) for param in params])
        row = cursor.fetchone()
    if row is None:
        return None
    return prebuilt_sql.instance_from_row(Agent, row[:-1]), bool(row[-1])


@functools.cache
def _agent_may_post_sql(vendor: str) -> tuple[str, tuple[object, ...]]:
    """The ORM's statement for an agent's row by key prefix with `agent_may_post`'s answer as its last column, and
    its parameters with "<slug>" and "<prefix>" where the values go (EXISTS adds a constant of its own)."""
    columns = [field.attname for field in Agent._meta.concrete_fields]
    may_post = Exists(Queue.objects.filter(agents=OuterRef("pk"), slug="<slug>"))
    rows = Agent.objects.filter(key_prefix="<prefix>").annotate(rh_may_post=may_post).order_by()
    sql, params = rows.values_list(*columns, "rh_may_post").query.sql_with_params()
    if sorted(p for p in params if p in ("<slug>", "<prefix>")) != ["<prefix>", "<slug>"]:
        raise AssertionError(f"unexpected parameters {params!r}")
    return sql, tuple(params)


@functools.cache
def _may_post_sql(vendor: str) -> str:
    query = Queue.objects.filter(agents=0).filter(slug="").order_by().values("pk")[:1].query
    sql, params = query.sql_with_params()
    if list(params) != [0, ""]:  # the placeholders' order is the one `agent_may_post` fills
        raise AssertionError(f"unexpected parameters {params!r}")
    return sql
