"""MCP 2026-07-28 input-required round trips (SEP-2322), driven by hand and answered by ReviewHub reviewers.

`Client.call_tool` resolves `InputRequiredResult` rounds in memory, so a restart loses them. An agent that must
survive one drives the rounds by hand, the way `session.call_tool(..., allow_input_required=True)` allows; this
module does it (reading each result as sent, so that recognition is the spec's rather than the SDK's parse):

    bridge = ReviewHubElicitation(reviewhub, queue="ops")  # declares the elicitation capability
    async with Client(server, elicitation_callback=bridge) as client:
        result = await resolve_input_required(client.session, "deploy", {"version": "1.4"}, reviewhub, "ops")

Every entry of the result's `inputRequests` is posted to ReviewHub (elicitations; sampling and roots requests go
to the session's own callbacks). Each ReviewHub request carries the whole round in `context.mcp`:
`{server, method, params: {name, arguments}, requestState, inputKey, inputKeys, inputRequests, round, roundId}`. The call is then
re-issued — same name and arguments, `inputResponses` keyed like the requests, `requestState` echoed byte for
byte, a new JSON-RPC id — until the server returns a complete result.

A restarted agent finds its unfinished rounds with `find_pending_rounds(reviewhub)` (its open requests, `GET
/api/v1/requests?status=open`, plus an optional local `store` for rounds that were fully answered while it was
down) and continues each with `resume_input_required(session, pending, reviewhub, queue=...)`. The server must
accept the sealed state from another process: an SDK server configured with shared `RequestStateSecurity` keys.

Recognition follows the final spec: a result is a round only when `resultType` is `"input_required"` and it has a
non-empty `inputRequests` or `requestState`. No `resultType` means complete; a half-shaped result (no input
requests and no state) is a normal result, so the client cannot loop on a server bug. `max_rounds` (default 5)
ends a server that never stops asking with `InputRoundsExceeded`.

Elicitation outcomes follow `mcp_bridge`'s policy: no human answer to be had (ReviewHub unreachable, request
expired without an outcome or withdrawn, `timeout` elapsed) is answered `cancel`, and a timed-out request is
withdrawn. Unlike the bridge, a wait cancelled because the agent is stopping (Ctrl-C, SIGTERM, task cancelled)
leaves the round's requests open, to be resumed; `withdraw_round` abandons a round for good.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import anyio
import mcp.types as types
from mcp import InputRequiredRoundsExceededError
from mcp.client.session import ClientRequestContext, ClientSession
from mcp.shared.dispatcher import CallOptions
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import MCP_NAME_HEADER, encode_header_value
from pydantic import TypeAdapter

from reviewhub_client.errors import ReviewHubError
from reviewhub_client.mcp_bridge import Hub, request_body, wait_for_outcome, withdraw_quietly

logger = logging.getLogger(__name__)

DEFAULT_MAX_ROUNDS = 5
METHOD = "tools/call"


_INPUT_REQUEST: TypeAdapter[types.InputRequest] = TypeAdapter(types.InputRequest)


class InputRoundsExceeded(InputRequiredRoundsExceededError):
    """The server kept asking for input past `max_rounds`."""

    def __init__(self, name: str, max_rounds: int) -> None:
        RuntimeError.__init__(
            self,
            f"tools/call {name!r}: the server still asked for input after {max_rounds} rounds; giving up "
            "(raise max_rounds if the tool legitimately needs more)",
        )
        self.max_rounds = max_rounds
        self.name = name


# --- recognition ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class InputRound:
    """What an `input_required` result asks for: keyed wire requests and the opaque state to echo."""

    input_requests: dict[str, dict[str, Any]]
    request_state: str | None


def recognize_input_required(result: Mapping[str, Any]) -> InputRound | None:
    """The round a wire result asks for, or None when it is a (complete or half-shaped) normal result."""
    if result.get("resultType") != "input_required":
        return None
    requests = result.get("inputRequests")
    state = result.get("requestState")
    requests = dict(requests) if isinstance(requests, Mapping) else {}
    state = state if isinstance(state, str) and state else None
    if not requests and state is None:
        return None
    return InputRound(input_requests=requests, request_state=state)


def complete_result(result: Mapping[str, Any]) -> types.CallToolResult:
    """A terminal wire result as a `CallToolResult`; a half-shaped one has no `content`, so it gets none."""
    return types.CallToolResult.model_validate({"content": [], **result})


# --- a round in flight, and where it is kept -----------------------------------------------------------------------


@dataclass
class PendingRound:
    """One round of one call: enough to answer it and re-issue the call from any process."""

    round_id: str
    params: dict[str, Any]  # {"name", "arguments"} of the original tools/call
    request_state: str | None
    round: int
    input_requests: dict[str, dict[str, Any]]
    reviewhub_ids: dict[str, str] = field(default_factory=dict)  # input key -> ReviewHub request id
    server: str | None = None
    method: str = METHOD

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PendingRound:
        return cls(**dict(data))

    def context(self, key: str) -> dict[str, Any]:
        """`context.mcp` of the ReviewHub request answering `key`: the round, for a restarted agent."""
        return {
            "server": self.server,
            "method": self.method,
            "params": self.params,
            "requestState": self.request_state,
            "inputKey": key,
            "inputKeys": sorted(self.input_requests),
            "inputRequests": self.input_requests,
            "round": self.round,
            "roundId": self.round_id,
        }


class RoundStore(Protocol):
    """Optional local record of rounds in flight. ReviewHub's open requests already describe every round that
    still has an unanswered question; a store also covers rounds fully answered while the agent was down."""

    async def save(self, pending: PendingRound) -> None: ...

    async def discard(self, round_id: str) -> None: ...

    async def load(self) -> list[PendingRound]: ...


class JsonFileRoundStore:
    """A `RoundStore` in one JSON file (rewritten atomically)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def _read(self) -> dict[str, Any]:
        try:
            data: dict[str, Any] = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        return data

    def _write(self, data: Mapping[str, Any]) -> None:
        temporary = self.path.with_suffix(self.path.suffix + ".tmp")
        temporary.write_text(json.dumps(data))
        temporary.replace(self.path)

    async def save(self, pending: PendingRound) -> None:
        data = self._read()
        data[pending.round_id] = pending.to_json()
        self._write(data)

    async def discard(self, round_id: str) -> None:
        data = self._read()
        if data.pop(round_id, None) is not None:
            self._write(data)

    async def load(self) -> list[PendingRound]:
        return [PendingRound.from_json(item) for item in self._read().values()]


# --- driving the rounds --------------------------------------------------------------------------------------------


async def call_tool_raw(
    session: ClientSession,
    name: str,
    arguments: Mapping[str, Any] | None,
    input_responses: types.InputResponses | None = None,
    request_state: str | None = None,
    read_timeout_seconds: float | None = None,
) -> dict[str, Any]:
    """One `tools/call` (a new JSON-RPC id each time), its result kept as the wire mapping so that recognition
    follows the spec rather than the SDK's own parse."""
    request = types.CallToolRequest(
        params=types.CallToolRequestParams(
            name=name,
            arguments=dict(arguments) if arguments is not None else None,
            input_responses=input_responses,
            request_state=request_state,
        )
    )
    return await send_unvalidated(session, request, read_timeout_seconds)


async def send_unvalidated(
    session: ClientSession, request: types.CallToolRequest, read_timeout_seconds: float | None = None
) -> dict[str, Any]:
    """`session.send_request` without its result validation: the raw result mapping as the server sent it.

    `send_request` checks every result against the negotiated revision's schema before any result type sees it,
    and the 2026-07-28 schema marks `resultType` required, so a final result without it (which a client MUST
    read as `complete`) raises there and the call is lost after its rounds were answered. This sends the
    request the way `send_request` does: the session's per-request stamp (the 2026-07-28 `_meta` and
    `Mcp-Method`/`Mcp-Name`/`MCP-Protocol-Version` headers), then its dispatcher, a new JSON-RPC id each time.
    It uses the session's private `_stamp` and `_dispatcher` (mcp 2.x); tests/mcp/test_input_required_wire.py
    fails if they change, and notices when the SDK stops refusing such a result, so this can go.
    """
    data = request.model_dump(by_alias=True, mode="json", exclude_none=True)
    opts: CallOptions = {}
    session._stamp(data, opts)  # private: see the docstring
    headers = opts.setdefault("headers", {})
    if MCP_NAME_HEADER not in headers:  # pre-2026 sessions: send_request names the tool the same way
        headers[MCP_NAME_HEADER] = encode_header_value(request.params.name)
    timeout = read_timeout_seconds
    if timeout is None:
        timeout = session._session_read_timeout_seconds
    if timeout is not None:
        opts["timeout"] = timeout
    return await session._dispatcher.send_raw_request(data["method"], data.get("params"), opts)


async def resolve_input_required(
    session: ClientSession,
    name: str,
    arguments: Mapping[str, Any] | None,
    reviewhub: Any,
    queue: str,
    *,
    max_rounds: int = DEFAULT_MAX_ROUNDS,
    store: RoundStore | None = None,
    server_name: str | None = None,
    timeout: float | None = None,
    priority: int = 0,
) -> types.CallToolResult:
    """Call a tool, answering every input-required round through ReviewHub, and return its final result.

    Raises:
        InputRoundsExceeded: the server asked for input more than `max_rounds` times.
        MCPError: the server answered with an error, or a sampling/roots callback refused its request.
    """
    first = await call_tool_raw(session, name, arguments)
    params = {"name": name, "arguments": dict(arguments or {})}
    server = server_name or _server_name(session)
    return await _drive(
        session, first, params, 0, Hub.of(reviewhub), queue, max_rounds, store, server, timeout, priority
    )


async def resume_input_required(
    session: ClientSession,
    pending: PendingRound,
    reviewhub: Any,
    queue: str,
    *,
    max_rounds: int = DEFAULT_MAX_ROUNDS,
    store: RoundStore | None = None,
    timeout: float | None = None,
    priority: int = 0,
) -> types.CallToolResult:
    """Continue a round another process started (see `find_pending_rounds`): wait for its answers, re-issue the
    call with the stored `requestState`, and carry on until the result is complete."""
    hub = Hub.of(reviewhub)
    responses = await _answers(session, pending, hub, queue, timeout, priority, store)
    raw = await _retry(session, pending, responses)
    if store is not None:
        await store.discard(pending.round_id)
    return await _drive(
        session,
        raw,
        pending.params,
        pending.round,
        hub,
        queue,
        max_rounds,
        store,
        pending.server,
        timeout,
        priority,
    )


async def find_pending_rounds(reviewhub: Any, store: RoundStore | None = None) -> list[PendingRound]:
    """The rounds this agent left unfinished: from its open ReviewHub requests, and from `store` if given."""
    hub = Hub.of(reviewhub)
    rounds: dict[str, PendingRound] = {}
    if store is not None:
        rounds = {pending.round_id: pending for pending in await store.load()}
    open_rows = [row for row in await hub.list_requests("open") if _round_of(row) is not None]
    incomplete: set[str] = set()
    for row in open_rows:
        mcp = _round_of(row)
        assert mcp is not None
        pending = rounds.get(mcp["roundId"])
        if pending is None:
            pending = PendingRound(
                round_id=mcp["roundId"],
                params=dict(mcp["params"]),
                request_state=mcp.get("requestState"),
                round=int(mcp["round"]),
                input_requests=dict(
                    mcp.get("inputRequests") or {key: {} for key in mcp.get("inputKeys", [])}
                ),
                server=mcp.get("server"),
                method=mcp.get("method", METHOD),
            )
            rounds[pending.round_id] = pending
            incomplete.add(pending.round_id)
        pending.reviewhub_ids[mcp["inputKey"]] = str(row["id"])
    if incomplete:
        # Some of those rounds' questions may have been answered already: they are closed, not open.
        for row in await hub.list_requests("all"):
            mcp = _round_of(row)
            if mcp is not None and mcp["roundId"] in incomplete:
                rounds[mcp["roundId"]].reviewhub_ids.setdefault(mcp["inputKey"], str(row["id"]))
    return sorted(rounds.values(), key=lambda pending: (pending.round_id, pending.round))


async def withdraw_round(reviewhub: Any, pending: PendingRound, store: RoundStore | None = None) -> None:
    """Give a round up: withdraw its open requests (reviewers see them vanish) and forget it."""
    hub = Hub.of(reviewhub)
    for request_id in pending.reviewhub_ids.values():
        await withdraw_quietly(hub, request_id)
    if store is not None:
        await store.discard(pending.round_id)


def _round_of(row: Mapping[str, Any]) -> dict[str, Any] | None:
    mcp = (row.get("context") or {}).get("mcp")
    if isinstance(mcp, Mapping) and mcp.get("roundId") and mcp.get("method") == METHOD and "inputKey" in mcp:
        return dict(mcp)
    return None


def _server_name(session: ClientSession) -> str | None:
    info = session.server_info
    return info.name if info is not None else None


async def _drive(
    session: ClientSession,
    raw: dict[str, Any],
    params: dict[str, Any],
    rounds_done: int,
    hub: Hub,
    queue: str,
    max_rounds: int,
    store: RoundStore | None,
    server: str | None,
    timeout: float | None,
    priority: int,
) -> types.CallToolResult:
    name = params["name"]
    round_no = rounds_done
    while (asked := recognize_input_required(raw)) is not None:
        round_no += 1
        if round_no > max_rounds:
            raise InputRoundsExceeded(name, max_rounds)
        pending = PendingRound(
            round_id=str(uuid.uuid4()),
            params=params,
            request_state=asked.request_state,
            round=round_no,
            input_requests=asked.input_requests,
            server=server,
        )
        if not asked.input_requests:
            # State only: the server is working; come back after a short pause, carrying the state.
            await anyio.sleep(min(0.05 * 2 ** (round_no - 1), 1.0))
            raw = await _retry(session, pending, None)
            continue
        responses = await _answers(session, pending, hub, queue, timeout, priority, store)
        raw = await _retry(session, pending, responses)
        if store is not None:
            await store.discard(pending.round_id)
    result = complete_result(raw)
    if not result.is_error:
        await session.validate_tool_result(name, result)
    return result


async def _retry(
    session: ClientSession, pending: PendingRound, responses: types.InputResponses | None
) -> dict[str, Any]:
    return await call_tool_raw(
        session, pending.params["name"], pending.params.get("arguments"), responses, pending.request_state
    )


async def _answers(
    session: ClientSession,
    pending: PendingRound,
    hub: Hub,
    queue: str,
    timeout: float | None,
    priority: int,
    store: RoundStore | None = None,
) -> types.InputResponses:
    """Post the round's elicitations (those not posted yet), record the round, and collect every answer."""
    parsed: dict[str, types.InputRequest] = {}
    for key, wire in pending.input_requests.items():
        if wire:
            parsed[key] = _INPUT_REQUEST.validate_python(wire)
    if store is not None:
        # Written ahead of posting: a crash between the two is repaired on resume, where posting again under
        # the same Idempotency-Keys returns the requests already made.
        await store.save(pending)
    for key, request in parsed.items():
        if isinstance(request, types.ElicitRequest) and key not in pending.reviewhub_ids:
            body = request_body(
                request.params,
                queue=queue,
                context={"mcp": pending.context(key)},
                priority=priority,
                expires_in=None,
            )
            try:
                request_id = await hub.create(body, idempotency_key=f"mcp-round:{pending.round_id}:{key}")
            except ReviewHubError as exc:
                logger.warning("ReviewHub could not take input %r; answering cancel: %s", key, exc)
                continue
            pending.reviewhub_ids[key] = request_id
    if store is not None:
        await store.save(pending)

    responses: types.InputResponses = {}
    refused: types.ErrorData | None = None

    async def answer(key: str) -> None:
        nonlocal refused
        request = parsed.get(key)
        if key in pending.reviewhub_ids:
            # A stopping process (cancelled wait) keeps the request: resuming is the point of this module.
            responses[key] = await wait_for_outcome(
                hub, pending.reviewhub_ids[key], timeout, withdraw_on_cancel=False
            )
        elif isinstance(request, types.ElicitRequest) or request is None:
            responses[key] = types.ElicitResult(action="cancel")  # never reached a reviewer
        else:
            # Sampling and roots are the host's business, not a reviewer's: the session's own callbacks answer.
            context = ClientRequestContext(session=session, request_id=key)
            response = await session.dispatch_input_request(context, request)
            if isinstance(response, types.ErrorData):
                refused = response
                return
            responses[key] = response

    async with anyio.create_task_group() as group:
        for key in pending.input_requests:
            group.start_soon(answer, key)
    if refused is not None:
        for request_id in pending.reviewhub_ids.values():
            await withdraw_quietly(hub, request_id)
        raise MCPError.from_error_data(refused)
    return responses


__all__ = [
    "DEFAULT_MAX_ROUNDS",
    "InputRound",
    "InputRoundsExceeded",
    "JsonFileRoundStore",
    "PendingRound",
    "RoundStore",
    "complete_result",
    "find_pending_rounds",
    "recognize_input_required",
    "resolve_input_required",
    "resume_input_required",
    "withdraw_round",
]
