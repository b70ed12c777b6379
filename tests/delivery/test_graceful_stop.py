"""A served process stopped as a deployment stops it (SIGTERM): its agent sockets are closed with 1012 (service
restart, which the clients treat as a drop to resume from), a long-poll still waiting at the graceful-stop bound is
answered 503 with Retry-After (which the clients retry), never the server's 500, and the process ends by itself
instead of being killed."""

import asyncio
import json
import signal
import threading
import time
from collections.abc import Callable
from http.client import HTTPConnection
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from elicitation.models import Agent, ElicitationRequest
from reviewhub.cli import SERVER_OPTIONS
from tests.delivery.liveserver import LiveServer

pytestmark = pytest.mark.django_db(transaction=True)


def read_by_server(server_port: int, client_port: int) -> bool:
    """Whether the server's end of this loopback connection has read everything sent to it (its receive queue in
    /proc/net/tcp is empty): the request was parsed and handed to the application."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, queues = fields[1], fields[2], fields[4]
        if int(local.split(":")[1], 16) == server_port and int(remote.split(":")[1], 16) == client_port:
            return int(queues.split(":")[1], 16) == 0
    return False


GRACE_SECONDS = float(SERVER_OPTIONS[SERVER_OPTIONS.index("--timeout-graceful-shutdown") + 1])


def test_a_stopped_server_closes_sockets_with_1012_answers_long_polls_503_and_exits_by_itself(
    agent_with_key: tuple[Agent, str], make_request: Callable[..., ElicitationRequest]
) -> None:
    _, key = agent_with_key
    request = make_request()
    server = LiveServer().start()
    long_poll: dict[str, Any] = {}
    try:
        http = HTTPConnection("127.0.0.1", server.port, timeout=120)
        http.request(
            "GET", f"/api/v1/requests/{request.pk}?wait=60", headers={"Authorization": f"Bearer {key}"}
        )

        def wait_long() -> None:
            response = http.getresponse()
            long_poll.update(
                status=response.status,
                retry_after=response.getheader("Retry-After"),
                body=json.loads(response.read()),
                answered_after=time.monotonic() - long_poll["stopped_at"],
            )

        async def socket_then_stop() -> int | None:
            url = f"{server.ws_url}/ws/agent/"
            async with connect(
                url, additional_headers={"Authorization": f"Bearer {key}"}, open_timeout=60
            ) as ws:
                assert json.loads(await ws.recv())["type"] == "hello"
                poller.start()
                assert http.sock is not None
                give_up = time.monotonic() + 120  # a safety net, not a deadline
                while not read_by_server(server.port, http.sock.getsockname()[1]):
                    assert time.monotonic() < give_up, "the server never read the long-poll"
                    await asyncio.sleep(0.05)  # the long-poll is read, so it waits (60 s, unless cut)
                stopped_at = long_poll["stopped_at"] = time.monotonic()
                server.signal(signal.SIGTERM)
                try:
                    while True:
                        await asyncio.wait_for(ws.recv(), timeout=60)
                except ConnectionClosed as closed:
                    long_poll["socket_closed_after"] = time.monotonic() - stopped_at
                    return closed.rcvd.code if closed.rcvd is not None else None

        poller = threading.Thread(target=wait_long)
        code = asyncio.run(socket_then_stop())
        assert server.process is not None
        exit_status = server.process.wait(
            timeout=GRACE_SECONDS + 60
        )  # a safety net: the bound is GRACE_SECONDS
        poller.join(timeout=60)
    finally:
        server.kill()

    assert code == 1012, server.logs()
    assert long_poll["socket_closed_after"] < GRACE_SECONDS  # closed at once, not at the bound
    assert exit_status == -signal.SIGTERM  # ended by the signal it was sent, not killed
    assert long_poll["status"] == 503 and long_poll["retry_after"] == "1", long_poll
    assert long_poll["body"] == {"code": "unavailable", "detail": "This server is restarting; poll again."}
    assert long_poll["answered_after"] >= GRACE_SECONDS * 0.9  # it waited out the bound (uvicorn's timer)
