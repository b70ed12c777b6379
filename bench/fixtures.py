"""Rows the benchmarks need, built fast, and removed afterwards.

Everything a benchmark creates is named `bench-<benchmark>-...` (queues, agents, users), so `purge(prefix)`
finds it again. Many rows at once go in as one `INSERT ... SELECT FROM generate_series` copying a template row
made through the ORM, so the bulk rows carry every column (including ones other modules add) exactly as the
application would write them.
"""

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.sessions.backends.db import SessionStore
from django.db import connection, models, transaction

from elicitation.models import Agent, AgentEvent, ElicitationRequest, Queue, RequestEvent, ReviewerToken
from elicitation.queue import clock
from elicitation.queue.keys import issue_key

SCHEMA = {
    "type": "object",
    "properties": {
        "approve": {"type": "boolean", "title": "Approve the deployment?"},
        "reason": {"type": "string", "title": "Why", "maxLength": 200},
    },
    "required": ["approve"],
}
CREATE_BODY = {
    "message": "Deploy build 1234 to production?",
    "mode": "form",
    "requestedSchema": SCHEMA,
    "context": {"server": "deployer", "tool": "deploy", "arguments": {"build": 1234}},
    "priority": 0,
    "expiresIn": 3600,
}


@dataclass(frozen=True)
class Credential:
    id: int
    key: str  # the bearer key (agent) or reviewer token


def create_queue(slug: str) -> Queue:
    # Long deadline and lease: nothing may expire or be released while it is being measured.
    queue, _ = Queue.objects.get_or_create(
        slug=slug, defaults={"name": slug, "default_deadline_seconds": 86_400, "lease_seconds": 86_400}
    )
    return queue


def create_agents(prefix: str, count: int, queue: Queue) -> list[Credential]:
    """`count` agents allowed on `queue`, each with its own key (keys are HMACed as the app does)."""
    keys = [issue_key("rh") for _ in range(count)]
    agents = Agent.objects.bulk_create(
        [
            Agent(name=f"{prefix}-agent-{i}", key_prefix=key.prefix, key_hash=key.hash, scopes=["requests"])
            for i, key in enumerate(keys)
        ],
        batch_size=2000,
    )
    through = Agent.queues.through
    through.objects.bulk_create(
        [through(agent_id=agent.pk, queue_id=queue.pk) for agent in agents], batch_size=2000
    )
    return [Credential(agent.pk, key.full) for agent, key in zip(agents, keys, strict=True)]


def create_reviewers(prefix: str, count: int, queue: Queue) -> list[Credential]:
    """`count` reviewers, members of `queue`, each with a reviewer API token."""
    user_model = get_user_model()
    users = [user_model(username=f"{prefix}-reviewer-{i}") for i in range(count)]
    for user in users:
        user.set_unusable_password()
    users = user_model.objects.bulk_create(users)
    queue.members.add(*users)
    keys = [issue_key("rhr") for _ in users]
    ReviewerToken.objects.bulk_create(
        [
            ReviewerToken(user=user, key_prefix=key.prefix, key_hash=key.hash)
            for user, key in zip(users, keys, strict=True)
        ]
    )
    return [Credential(user.pk, key.full) for user, key in zip(users, keys, strict=True)]


def login_session(user_id: int) -> str:
    """A logged-in session for a reviewer page, made directly in the session store: its cookie value."""
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY

    user = get_user_model().objects.get(pk=user_id)
    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.create()
    return str(session.session_key)


def bulk_requests(
    queue: Queue,
    agent_id: int,
    count: int,
    *,
    claimed_by: int | None = None,
    priorities: int = 3,
) -> int:
    """Insert `count` open requests copied from one ORM-made template; distinct ages and a few priorities."""
    now = clock.now()
    template = ElicitationRequest.objects.create(
        queue=queue,
        agent_id=agent_id,
        message=CREATE_BODY["message"],
        mode="form",
        requested_schema=SCHEMA,
        questions=[],
        context=CREATE_BODY["context"],
        deadline=now + timedelta(days=1),
    )
    table = ElicitationRequest._meta.db_table
    overrides: dict[str, str] = {
        "id": "gen_random_uuid()",
        "priority": f"(n %% {priorities})",
        # Spread ages so review order is total; older rows first.
        "created_at": "t.created_at - make_interval(secs => n * 0.001)",
        "updated_at": "t.updated_at",
    }
    if claimed_by is not None:
        overrides["status"] = "'claimed'"
        overrides["claimed_by_id"] = "%s"
        overrides["claimed_at"] = "t.created_at"
        overrides["lease_expires_at"] = "t.deadline"
    columns = [f.column for f in ElicitationRequest._meta.concrete_fields]
    select = ", ".join(overrides.get(c, f"t.{connection.ops.quote_name(c)}") for c in columns)
    # The claimed_by override is the only placeholder in the column list.
    column_params = [claimed_by] if claimed_by is not None else []
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({', '.join(connection.ops.quote_name(c) for c in columns)}) "
            f"SELECT {select} FROM {table} t, generate_series(1, %s) AS n WHERE t.id = %s",
            [*column_params, count - 1, template.pk],
        )
        if claimed_by is not None:
            ElicitationRequest.objects.filter(pk=template.pk).update(
                status="claimed",
                claimed_by_id=claimed_by,
                claimed_at=now,
                lease_expires_at=now + timedelta(days=1),
            )
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {table}")
    return count


def requests_per_agent(
    queue: Queue, agent_ids: list[int], per_agent: int, *, claimed_by: int | None = None
) -> dict[int, list[str]]:
    """`per_agent` open requests for each agent (pending, or claimed by `claimed_by`), in one INSERT: thousands of
    agents at once. {agent id: [ids]}."""
    template = ElicitationRequest.objects.create(
        queue=queue,
        agent_id=agent_ids[0],
        message=CREATE_BODY["message"],
        mode="form",
        requested_schema=SCHEMA,
        questions=[],
        context=CREATE_BODY["context"],
        deadline=clock.now() + timedelta(days=1),
    )
    table = ElicitationRequest._meta.db_table
    overrides = {"id": "gen_random_uuid()", "agent_id": "a.agent_id"}
    column_params: list[Any] = []
    if claimed_by is not None:
        overrides.update(
            status="'claimed'", claimed_by_id="%s", claimed_at="t.created_at", lease_expires_at="t.deadline"
        )
        column_params.append(claimed_by)
    columns = [f.column for f in ElicitationRequest._meta.concrete_fields]
    select = ", ".join(overrides.get(c, f"t.{connection.ops.quote_name(c)}") for c in columns)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({', '.join(connection.ops.quote_name(c) for c in columns)}) "
            f"SELECT {select} FROM {table} t, unnest(%s::bigint[]) AS a(agent_id), generate_series(1, %s) AS n "
            "WHERE t.id = %s",
            [*column_params, agent_ids, per_agent, template.pk],
        )
        cursor.execute(f"ANALYZE {table}")
    found: dict[int, list[str]] = {agent_id: [] for agent_id in agent_ids}
    rows = ElicitationRequest.objects.filter(
        agent_id__in=agent_ids, status="pending" if claimed_by is None else "claimed"
    )
    for agent_id, pk in rows.values_list("agent_id", "id"):
        found[agent_id].append(str(pk))
    return found


def _delete_rows(
    model: type[models.Model], where: str, params: list[Any], cursor: Any, depth: int = 0
) -> None:
    """DELETE rows of `model` matching `where`, after their dependents (cascade by hand, in SQL, not Python)."""
    table = model._meta.db_table
    pk = model._meta.pk.column  # type: ignore[union-attr]
    subquery = f"SELECT {pk} FROM {table} WHERE {where}"
    for relation in model._meta.get_fields(include_hidden=True):
        if not (
            relation.auto_created and not relation.concrete and (relation.one_to_many or relation.one_to_one)
        ):
            continue
        child = relation.related_model
        column = relation.field.column  # type: ignore[union-attr]
        on_delete = getattr(relation, "on_delete", models.CASCADE)
        if on_delete is models.SET_NULL:
            cursor.execute(
                f"UPDATE {child._meta.db_table} SET {column} = NULL WHERE {column} IN ({subquery})", params
            )
        elif depth < 4:
            _delete_rows(child, f"{column} IN ({subquery})", params, cursor, depth + 1)
    cursor.execute(f"DELETE FROM {table} WHERE {where}", params)


def purge(prefix: str) -> None:
    """Remove every row a benchmark named `prefix` created: requests and their trail, agents, users, queues."""
    user_model = get_user_model()
    like = [prefix + "%"]
    with transaction.atomic(), connection.cursor() as cursor:
        queue_ids = f"SELECT id FROM {Queue._meta.db_table} WHERE slug LIKE %s"
        agent_ids = f"SELECT id FROM {Agent._meta.db_table} WHERE name LIKE %s"
        _delete_rows(
            ElicitationRequest, f"queue_id IN ({queue_ids}) OR agent_id IN ({agent_ids})", like + like, cursor
        )
        _delete_rows(Agent, "name LIKE %s", like, cursor)
        _delete_rows(user_model, "username LIKE %s", like, cursor)
        _delete_rows(Queue, "slug LIKE %s", like, cursor)
    vacuum()


def vacuum() -> None:
    """VACUUM ANALYZE the tables benchmarks churn. This machine's PostgreSQL runs with autovacuum off
    (configuration file), so without it every later claim would walk the index entries of rows deleted or
    claimed earlier, as a production database with autovacuum on would not."""
    tables = [model._meta.db_table for model in (ElicitationRequest, RequestEvent, AgentEvent)]
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM (ANALYZE) {', '.join(tables)}")
