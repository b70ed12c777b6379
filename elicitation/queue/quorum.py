"""Quorum with separation of duties: N approvals from distinct reviewers, optionally so many per group, a veto
rule, and the agent's owners kept out where the policy says so.

The first approver fills the form: their answer becomes the *proposal* and their approval the first. Later
approvers approve that proposal as it stands, or decline (a veto, by default ending the decision with that
outcome). The decision is final when N approvals are in and every group has its count; only then does the agent
get one ElicitResult, whose `_meta` carries the digest of what was asked (message, schema, tool arguments).

This module judges and describes; `transitions.respond_in_quorum` applies its verdicts through `_apply`. The
request's `policy` column holds the requirement and the progress shown to pages and to the agent; the
`Approval` rows (one per reviewer and request, a database constraint) are what is counted under the row lock.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from elicitation.models import ElicitationRequest

DECISION_META = "reviewhub/decision"


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    group: str = ""
    final: bool = False
    audit_kind: str = ""
    reason: str = ""


def requirement(request: ElicitationRequest) -> dict[str, Any] | None:
    """The quorum this request needs, or None when one reviewer decides (every request without a policy)."""
    policy = request.policy
    if not isinstance(policy, dict):
        return None
    quorum = policy.get("quorum")
    return quorum if isinstance(quorum, dict) else None


def initial_state(quorum: Mapping[str, Any], digest: str) -> dict[str, Any]:
    return {"quorum": dict(quorum), "digest": digest, "proposal": None, "approvals": []}


def judge_approval(
    quorum: Mapping[str, Any],
    approvals: Iterable[tuple[int, str]],
    *,
    user_id: int,
    user_groups: set[str],
    is_owner: bool,
) -> Verdict:
    """May this reviewer approve now, counted for which group, and does their approval make it final?
    `approvals` are (reviewer id, group) of the approvals already recorded."""
    recorded = list(approvals)
    if quorum.get("exclude_owner") and is_owner:
        return Verdict(
            False, audit_kind="approval_excluded", reason="owners of the agent may not decide its requests"
        )
    if any(reviewer == user_id for reviewer, _ in recorded):
        return Verdict(False, audit_kind="approval_refused", reason="you already approved this request")
    required = int(quorum.get("approvals", 1))
    groups: dict[str, int] = dict(quorum.get("groups") or {})
    counted = {name: sum(1 for _, group in recorded if group == name) for name in groups}
    missing = {name: need - counted[name] for name, need in groups.items() if need > counted[name]}
    free_slots = required - sum(groups.values()) - sum(1 for _, group in recorded if group not in groups)
    group = next((name for name in sorted(missing) if name in user_groups), None)
    if group is None:
        if free_slots <= 0:
            wanted = ", ".join(sorted(missing)) or "nobody"
            return Verdict(
                False,
                audit_kind="approval_refused",
                reason=f"the approvals still needed must come from: {wanted}",
            )
        group = ""
    if group:
        missing[group] -= 1
        if missing[group] == 0:
            del missing[group]
    final = len(recorded) + 1 >= required and not missing
    return Verdict(True, group=group, final=final, audit_kind="approved")


def judge_veto(quorum: Mapping[str, Any], *, is_owner: bool) -> Verdict:
    if quorum.get("exclude_owner") and is_owner:
        return Verdict(
            False, audit_kind="approval_excluded", reason="owners of the agent may not decide its requests"
        )
    if quorum.get("veto", "any") == "none":
        return Verdict(True, final=False, audit_kind="objected")
    return Verdict(True, final=True, audit_kind="vetoed")


def with_approval(
    state: Mapping[str, Any], *, username: str, group: str, at: datetime, proposal: dict[str, Any] | None
) -> dict[str, Any]:
    fresh = dict(state)
    fresh["approvals"] = [*state.get("approvals", []), {"by": username, "group": group, "at": at.isoformat()}]
    if state.get("proposal") is None:
        fresh["proposal"] = {"content": proposal, "by": username}
    return fresh


def with_objection(state: Mapping[str, Any], *, username: str, action: str, at: datetime) -> dict[str, Any]:
    fresh = dict(state)
    fresh["objections"] = [
        *state.get("objections", []),
        {"by": username, "action": action, "at": at.isoformat()},
    ]
    return fresh


def proposal(state: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The answer the first approver filled in (later approvers approve exactly this), or None before."""
    if not isinstance(state, Mapping) or not isinstance(state.get("proposal"), Mapping):
        return None
    content = state["proposal"].get("content")
    return content if isinstance(content, dict) else None


def result_meta(state: Mapping[str, Any], *, vetoed_by: str | None = None) -> dict[str, Any]:
    decision: dict[str, Any] = {
        "digest": state.get("digest"),
        "approvals": [{"by": a["by"], "group": a["group"]} for a in state.get("approvals", [])],
        "required": state.get("quorum", {}).get("approvals", 1),
    }
    if vetoed_by is not None:
        decision["vetoedBy"] = vetoed_by
    return {DECISION_META: decision}


def progress(state: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Partial progress, as the agent's GET and the pages show it: "1 of 2: alice"."""
    if not isinstance(state, Mapping) or not isinstance(state.get("quorum"), Mapping):
        return None
    quorum = state["quorum"]
    approvals = list(state.get("approvals", []))
    required = int(quorum.get("approvals", 1))
    names = [a["by"] for a in approvals]
    groups = {
        name: {"required": need, "approved": sum(1 for a in approvals if a["group"] == name)}
        for name, need in (quorum.get("groups") or {}).items()
    }
    text = f"{len(approvals)} of {required}" + (": " + ", ".join(names) if names else "")
    return {
        "kind": "quorum",
        "text": text,
        "required": required,
        "approvals": len(approvals),
        "approvers": names,
        "groups": groups,
        "proposed": state.get("proposal") is not None,
        "objections": [o["by"] for o in state.get("objections", [])],
        "digest": state.get("digest"),
    }


def counts(state: Mapping[str, Any] | None) -> dict[str, int] | None:
    """Approvals so far and approvals needed, and nothing else: what a queue row shows ("1 of 2 approvals") and
    what its live push may carry, with no names and no proposed content."""
    shown = progress(state)
    if shown is None:
        return None
    return {"approved": shown["approvals"], "required": shown["required"]}
