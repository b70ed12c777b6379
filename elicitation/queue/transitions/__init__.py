"""Every state change of a request, each through the one path (`path.apply_transition`): lock the row, guarded
UPDATE whose row count says who won, audit row, outbox row where the agent must hear of it, and a signal whose
listeners push only after commit. A loser gets InvalidTransition (409), never a half-written row.

```
pending ──claim──▶ claimed ──respond(accept|decline|cancel)──▶ completed
   ▲                 │
   └──release/lease──┘
pending|claimed ──deadline──▶ expired (or escalated to another queue)
pending|claimed ──agent cancels──▶ withdrawn
```

One concept per module; callers use the names below (`transitions.respond(...)`):

- `path`: the one path (lock, guarded update, audit and outbox rows, signal) every other module takes.
- `intake`: an agent creates (idempotently, through the queue's answer rules) or withdraws a request, or reports
  its URL flow complete; the queue it may post to.
- `claims`: claim, claim next, take over, renew, release, and the sweep of expired leases.
- `drafts`: the shared per-question drafts of a claimed request.
- `answers`: a reviewer's accept, decline or cancel; a hosted flow closing its URL-mode request.
- `held_answers`: an answer kept through its undo window, then sent through `answers.respond`.
- `quorum`: answers to a request that needs N-of-M approvals.
- `completion`: what every answer writes when it closes a request, and its content's errors as API fields.
- `deadlines`: expiry at the deadline (or escalation to another queue).
- `escalation`: the escalation chain before the deadline (notify tier 1, then reassign).

The modules depend on `path`, never the other way; `answers` uses `quorum` and `deadlines`.
"""

from elicitation.queue.transitions.answers import complete_url_request, respond
from elicitation.queue.transitions.claims import (
    claim_next,
    claim_request,
    release_claim,
    release_claim_as_operator,
    release_expired_claims,
    renew_claim,
    take_over_claim,
)
from elicitation.queue.transitions.completion import content_error_fields
from elicitation.queue.transitions.deadlines import expire_if_overdue, expire_overdue_requests, expire_request
from elicitation.queue.transitions.drafts import save_draft
from elicitation.queue.transitions.escalation import notify_next_tier, run_escalation_chain
from elicitation.queue.transitions.held_answers import (
    hold_answer,
    send_due_answers,
    send_held_answer,
    take_back,
)
from elicitation.queue.transitions.intake import (
    body_fingerprint,
    create_request,
    parse_schema_questions,
    postable_queue,
    report_url_flow_complete,
    withdraw_request,
)
from elicitation.queue.transitions.path import lock_request
from elicitation.queue.transitions.quorum import respond_in_quorum

__all__ = [
    "body_fingerprint",
    "claim_next",
    "claim_request",
    "complete_url_request",
    "content_error_fields",
    "create_request",
    "expire_if_overdue",
    "expire_overdue_requests",
    "expire_request",
    "hold_answer",
    "lock_request",
    "notify_next_tier",
    "parse_schema_questions",
    "postable_queue",
    "release_claim",
    "release_claim_as_operator",
    "release_expired_claims",
    "renew_claim",
    "report_url_flow_complete",
    "respond",
    "respond_in_quorum",
    "run_escalation_chain",
    "save_draft",
    "send_due_answers",
    "send_held_answer",
    "take_back",
    "take_over_claim",
    "withdraw_request",
]
