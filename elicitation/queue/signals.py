"""What the core tells the rest of the app, as Django signals.

The core sends them inside the transaction that made the change and imports nothing outside `queue/`; the
listeners (pushes and webhooks in `delivery/`, notifications in `ops/`) are connected in `ElicitationConfig.ready`
and defer their effects with `transaction.on_commit`, so nobody hears of a change that rolled back.
"""

from django.dispatch import Signal

# request: a new ElicitationRequest, still pending.
request_created = Signal()
# request: the row after the change; kind: what reviewer pages are told ("claimed", "completed", "escalated", …);
# left_queue_id: the queue an escalated request left.
request_changed = Signal()
# request_id, draft: one question's shared draft as reviewer pages show it.
draft_changed = Signal()
# event: the AgentEvent just appended to the agent's outbox; callback_url: where to POST it, or "".
agent_event_recorded = Signal()
# agent_id: the agent's key was revoked or rotated; its open sockets must check their key again.
agent_key_changed = Signal()
# request: the open request; step: 1 (unclaimed at T1: tell the queue's next tier) or 2 (still unanswered at T2 but
# held by a reviewer, policy `notify`: tell the holder and the queue's supervisors). Reach's listeners notify.
escalation_step_taken = Signal()
# held: a HeldAnswer just written (transitions/held_answers.py); its listener sends it at `held.send_at`.
answer_held = Signal()
