"""Reading an audit export back (the inverse of `queue/audit`'s writers), so a test can check what it holds."""

import csv
import io
import json
from typing import Any


def read_jsonl(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _int_or_none(value: str) -> int | None:
    return int(value) if value else None


def read_csv(text: str) -> list[dict[str, Any]]:
    rows = []
    for raw in csv.DictReader(io.StringIO(text)):
        row: dict[str, Any] = {
            key: (value[1:] if value[:2] in ("'=", "'+", "'-", "'@", "'\t", "'\r") else value)
            for key, value in raw.items()
        }
        row["id"] = int(row["id"])
        row["detail"] = json.loads(row["detail"]) if row["detail"] else {}
        for key in ("actor_user_id", "actor_agent_id"):
            row[key] = _int_or_none(row[key])
        for key in ("actor_user", "actor_agent"):
            row[key] = row[key] or None
        rows.append(row)
    return rows
