"""What tests compare of an MCP ElicitResult: the person's answer, without the `_meta` every completed request's
result carries (`reviewhub/receipt`, and `reviewhub/decision` when a rule or quorum decided)."""

from collections.abc import Mapping
from typing import Any


def answer_of(result: Mapping[str, Any] | None) -> dict[str, Any]:
    """The person's answer in an MCP ElicitResult: its action and content, without _meta (receipts, decisions).
    Every other key is kept, so an exact comparison still catches anything else."""
    assert result is not None, "no result"
    return {key: value for key, value in result.items() if key != "_meta"}
