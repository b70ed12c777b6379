"""The request page's decision card: what a reviewer needs to decide, read from the row without writing. The
tool's arguments as rows (long values folded), the argument digest in short, and any cue of risk: a rule that
routed or decided the request, or a `risk` the agent declared. All of it is untrusted text, escaped by templates."""

from dataclasses import dataclass
from typing import Any

from elicitation.models import ElicitationRequest, RequestEvent
from elicitation.queue import rules
from elicitation.reviewer import presenters

# A value longer than this, or on several lines, is folded under <details> with its first characters as summary.
FOLD_OVER = 80
SUMMARY_CHARS = 48
DIGEST_HEX = 12
# Values of a declared `risk` argument (or context key) shown as a warning cue.
RISKY = {"high", "critical", "severe", "dangerous", "destructive"}
RULE_CUE_KINDS = ("routed", "rule_applied")


@dataclass(frozen=True)
class ArgumentRow:
    name: str
    value: str
    folded: bool
    summary: str


@dataclass(frozen=True)
class RiskCue:
    text: str
    tone: str  # warn | info


def argument_rows(who: dict[str, Any]) -> list[ArgumentRow]:
    rows = []
    for name, value in who.get("argument_rows") or []:
        text = str(value)
        folded = len(text) > FOLD_OVER or "\n" in text
        first_line = text.split("\n", 1)[0]
        rows.append(
            ArgumentRow(name, text, folded, first_line[:SUMMARY_CHARS].rstrip() + "…" if folded else text)
        )
    return rows


def short_digest(found: ElicitationRequest) -> tuple[str, str]:
    """(`sha256:` and the first 12 hex digits, the full digest) of what a decision on this request is bound to."""
    full = rules.request_digest_of(found)
    algorithm, _, hexdigest = full.partition(":")
    return f"{algorithm}:{hexdigest[:DIGEST_HEX]}", full


def risk_cues(found: ElicitationRequest) -> list[RiskCue]:
    cues: list[RiskCue] = []
    context = found.context if isinstance(found.context, dict) else {}
    _, _, arguments, _ = rules.context_call(context)
    declared = arguments.get("risk", context.get("risk"))
    if isinstance(declared, str) and declared.strip():
        tone = "warn" if declared.strip().lower() in RISKY else "info"
        cues.append(RiskCue(f"Risk: {declared.strip()[:40]}", tone))
    events = RequestEvent.objects.filter(request=found, kind__in=RULE_CUE_KINDS).order_by("id")
    for event in events:
        detail = event.detail or {}
        name = str((detail.get("rule") or {}).get("name") or "a rule")[:80]
        if event.kind == "routed":
            cues.append(RiskCue(f"Routed here by rule “{name}”", "warn"))
        else:
            cues.append(RiskCue(f"Rule “{name}” applied", "info"))
    return cues


def card(found: ElicitationRequest) -> dict[str, Any]:
    who = presenters.context_view(found.context)
    short, full = short_digest(found)
    return {
        "who": who,
        "arguments": argument_rows(who),
        "digest_short": short,
        "digest": full,
        "risks": risk_cues(found),
    }
