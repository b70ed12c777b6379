"""Requests through the whole ASGI application, as a server would send them: long-polls wait in front of Django
exactly as in production (delivery/long_poll.py), with no test-only view in the way."""

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from channels.testing import HttpCommunicator

from reviewhub.asgi import application


@dataclass
class AsgiResponse:
    status_code: int
    headers: dict[str, str]
    content: bytes

    def json(self) -> Any:
        return json.loads(self.content)


class AsgiClient:
    async def get(
        self, path: str, params: dict[str, Any] | None = None, headers: dict[str, str] | None = None
    ) -> AsgiResponse:
        query = f"?{urlencode(params)}" if params else ""
        raw_headers = [(b"host", b"testserver")] + [
            (name.lower().encode("latin-1"), value.encode("latin-1"))
            for name, value in (headers or {}).items()
        ]
        communicator = HttpCommunicator(application, "GET", path + query, headers=raw_headers)
        response = await communicator.get_response(timeout=120)
        # Let the application finish, as a server does: Django returns the request's database connection to the
        # pool only after the response (request_finished), and a test that left it running leaked one per call.
        await communicator.wait(timeout=30)
        return AsgiResponse(
            status_code=response["status"],
            headers={k.decode("latin-1").lower(): v.decode("latin-1") for k, v in response["headers"]},
            content=response["body"],
        )
