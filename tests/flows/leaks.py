"""Searching everything ReviewHub wrote or sent for one secret: the needles (the value and its common encodings)
and dumps of database rows in every representation a leak could take."""

import base64
import http.server
import json
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.apps import apps
from django.contrib.sessions.models import Session
from django.db import connection


@dataclass
class LeakSearch:
    """Collects every place the secret shows up. `hits` should end up empty (or only the allowed place)."""

    secret: str
    hits: list[str] = field(default_factory=list)
    searched: int = 0

    @property
    def needles(self) -> list[str]:
        raw = self.secret.encode()
        return [
            self.secret,
            raw.hex(),
            raw.hex().upper(),
            base64.b64encode(raw).decode().rstrip("="),
            base64.urlsafe_b64encode(raw).decode().rstrip("="),
        ]

    def check(self, where: str, text: str) -> None:
        self.searched += 1
        for needle in self.needles:
            if needle in text:
                self.hits.append(f"{where}: {text[:300]!r}")
                return

    def check_all(self, where: str, texts: Iterable[str]) -> None:
        for index, text in enumerate(texts):
            self.check(f"{where}[{index}]", text)


def renderings(value: Any) -> Iterator[str]:
    """A stored value as text every way it could be read: binary as hex, base64 and latin-1; JSON dumped."""
    if value is None:
        return
    if isinstance(value, memoryview):
        value = value.tobytes()
    if isinstance(value, bytes | bytearray):
        data = bytes(value)
        yield data.hex()
        yield base64.b64encode(data).decode()
        yield data.decode("latin-1")
        return
    if isinstance(value, dict | list):
        yield json.dumps(value, default=str)
        yield repr(value)
        return
    yield str(value)


def model_rows() -> Iterator[tuple[str, str]]:
    """Every field of every row of every installed model (Django's view), plus decoded session data."""
    for model in apps.get_models():
        for obj in model._default_manager.all().iterator():
            for model_field in model._meta.concrete_fields:
                for text in renderings(getattr(obj, model_field.attname)):
                    yield f"{model._meta.label}#{obj.pk}.{model_field.name}", text
    for session in Session.objects.all():
        yield f"session#{session.pk}", json.dumps(session.get_decoded(), default=str)


def table_rows() -> Iterator[tuple[str, str]]:
    """Every column of every row of every table, read with raw SQL (tables without a model included)."""
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names(cursor):
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")  # our own table names
            columns = [column[0] for column in cursor.description]
            for row in cursor.fetchall():
                for column, value in zip(columns, row, strict=True):
                    for text in renderings(value):
                        yield f"{table}.{column}", text


def sqlite_file_rows(path: Path) -> Iterator[tuple[str, str]]:
    """Every row of a SQLite file, read from outside the server (the browser test's live database)."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            cursor = db.execute(f'SELECT * FROM "{table}"')  # names from sqlite_master
            columns = [column[0] for column in cursor.description]
            for row in cursor.fetchall():
                for column, value in zip(columns, row, strict=True):
                    for text in renderings(value):
                        yield f"{table}.{column}", text
    finally:
        db.close()


def sqlite_file_bytes(path: Path) -> Iterator[tuple[str, str]]:
    """The database file and its WAL as raw bytes: free pages and journal included."""
    for candidate in (path, Path(f"{path}-wal"), Path(f"{path}-journal")):
        if candidate.exists():
            yield (
                str(candidate),
                subprocess.run(  # read in a child: closing the file here would drop this process's SQLite locks
                    [
                        sys.executable,
                        "-c",
                        "import sys; sys.stdout.buffer.write(open(sys.argv[1], 'rb').read())",
                        str(candidate),
                    ],
                    capture_output=True,
                    check=True,
                ).stdout.decode("latin-1"),
            )


class WebhookReceiver:
    """A loopback HTTP server that records every webhook body POSTed to it (answers 204)."""

    def __init__(self) -> None:
        self.bodies: list[str] = []
        received = self.bodies

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                received.append(self.rfile.read(length).decode("utf-8", "replace"))
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass  # keep the test output quiet

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}/hook"

    def __enter__(self) -> "WebhookReceiver":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
