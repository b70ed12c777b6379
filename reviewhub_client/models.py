"""Typed results of the ReviewHub agent API, in MCP shapes (`ElicitResult`)."""

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

OPEN_STATUSES = frozenset({"pending", "claimed"})


def parse_time(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) and value else None


@dataclass(frozen=True)
class ElicitResult:
    """MCP ElicitResult: `action` is accept, decline or cancel; `content` only on an accepted form. `meta` is the
    result's `_meta`: `reviewhub/decision` (the rule or quorum that decided, and the argument digest) and
    `reviewhub/receipt` (the signed receipt, see `reviewhub_client.receipts`), passed on to MCP servers."""

    action: str
    content: dict[str, Any] | None = None
    meta: dict[str, Any] | None = None

    @property
    def accepted(self) -> bool:
        return self.action == "accept"

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ElicitResult":
        meta = data.get("_meta")
        return cls(
            action=str(data["action"]),
            content=data.get("content"),
            meta=meta if isinstance(meta, dict) else None,
        )

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"action": self.action}
        if self.content is not None:
            body["content"] = self.content
        if self.meta is not None:
            body["_meta"] = self.meta
        return body


@dataclass(frozen=True)
class ElicitationRequest:
    id: str
    status: str  # pending | claimed | completed | expired | withdrawn
    queue: str
    mode: str
    message: str
    requested_schema: dict[str, Any] | None = None
    url: str = ""
    elicitation_id: str = ""
    priority: int = 0
    context: dict[str, Any] = field(default_factory=dict)
    created_at: datetime | None = None
    deadline: datetime | None = None
    closed_at: datetime | None = None
    result: ElicitResult | None = None

    @property
    def is_open(self) -> bool:
        return self.status in OPEN_STATUSES

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ElicitationRequest":
        result = data.get("result")
        return cls(
            id=str(data["id"]),
            status=str(data["status"]),
            queue=str(data.get("queue", "")),
            mode=str(data.get("mode", "form")),
            message=str(data.get("message", "")),
            requested_schema=data.get("requestedSchema"),
            url=data.get("url") or "",
            elicitation_id=data.get("elicitationId") or "",
            priority=int(data.get("priority") or 0),
            context=data.get("context") or {},
            created_at=parse_time(data.get("createdAt")),
            deadline=parse_time(data.get("deadline")),
            closed_at=parse_time(data.get("closedAt")),
            result=ElicitResult.from_json(result) if result else None,
        )

    def to_dict(self) -> dict[str, Any]:
        """The API's JSON shape (camelCase keys, ISO times, `result` as an MCP ElicitResult dict)."""
        return {
            "id": self.id,
            "status": self.status,
            "queue": self.queue,
            "mode": self.mode,
            "message": self.message,
            "requestedSchema": self.requested_schema,
            "url": self.url,
            "elicitationId": self.elicitation_id,
            "priority": self.priority,
            "context": self.context,
            "createdAt": self.created_at.isoformat() if self.created_at else None,
            "deadline": self.deadline.isoformat() if self.deadline else None,
            "closedAt": self.closed_at.isoformat() if self.closed_at else None,
            "result": self.result.to_json() if self.result else None,
        }


@dataclass(frozen=True)
class AgentEvent:
    """One entry of the agent's durable feed: `cursor` orders them, gap-free per agent."""

    type: str  # completed | expired | withdrawn
    id: str
    cursor: int
    status: str
    result: ElicitResult | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "AgentEvent":
        result = data.get("result")
        return cls(
            type=str(data["type"]),
            id=str(data["id"]),
            cursor=int(data["cursor"]),
            status=str(data["status"]),
            result=ElicitResult.from_json(result) if result else None,
        )


@dataclass(frozen=True)
class EventPage:
    events: list[AgentEvent]
    cursor: int  # pass as `after` to continue
