"""The request-rate syntax (`600/min`, `20/s`, `1000/5min`, `off`), parsed once: settings turn AGENT_RATE and
REVIEWER_RATE into a `Rate` when the process starts (a malformed one stops it), and the throttles read that."""

import re
from dataclasses import dataclass

UNITS = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60, "h": 3600, "hour": 3600}
UNITS |= {"d": 86400, "day": 86400}
RATE_PATTERN = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*([a-z]+?)s?\s*$")


@dataclass(frozen=True)
class Rate:
    limit: int
    window_seconds: int


def parse_rate(text: str | None) -> Rate | None:
    """`600/min`, `20/s`, `1000/5min`, `5000/hour`; empty or `off` means no limit. Anything else is an error."""
    if text is None or text.strip().lower() in {"", "off", "none"}:
        return None
    match = RATE_PATTERN.match(text.strip().lower())
    if match is None or match.group(3) not in UNITS:
        raise ValueError(
            f"{text!r} is not a rate; write it as N/second, N/min, N/hour or N/day (e.g. 600/min)."
        )
    limit, multiple, unit = int(match.group(1)), int(match.group(2) or 1), match.group(3)
    if limit < 1 or multiple < 1:
        raise ValueError(f"{text!r} is not a usable rate: it must allow at least one request per window.")
    return Rate(limit=limit, window_seconds=multiple * UNITS[unit])
