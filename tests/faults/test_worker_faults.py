"""A Celery worker killed mid-delivery: the webhook is still delivered, and exactly once per delivery id once the
receiver deduplicates on ReviewHub-Delivery (the POST the dead worker had in flight got no answer)."""

import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from elicitation.delivery import tasks, webhooks
from elicitation.models import DeliveryStatus, Queue, WebhookDelivery
from elicitation.queue import transitions
from tests.conftest import FORM_SCHEMA
from tests.faults.processes import CeleryWorker

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]
LEASE_SECONDS = 3  # the attempt lease, shortened in the workers (tests/faults/worker_main.py) and here


class Receiver:
    """A webhook endpoint on loopback. The first POST is held open (the worker dies while it waits); later POSTs
    are answered 200. Records every delivery id it saw and the ones it answered."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.answered: list[str] = []
        self.first_arrived = threading.Event()
        self.release = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                delivery_id = self.headers.get(webhooks.DELIVERY_HEADER, "")
                receiver.seen.append(delivery_id)
                if len(receiver.seen) == 1:
                    receiver.first_arrived.set()
                    receiver.release.wait(timeout=30)
                    return  # never answered: the worker that sent it is dead by now
                receiver.answered.append(delivery_id)
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def __enter__(self) -> "Receiver":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def test_a_worker_killed_mid_delivery_is_replaced_and_the_webhook_lands_exactly_once(
    queue: Queue, make_agent: Any, make_reviewer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from reviewhub.celery import app as celery_app

    celery_app.control.purge()  # this helper's own Redis db: nothing queued by an earlier run
    monkeypatch.setattr(webhooks, "ATTEMPT_LEASE_SECONDS", LEASE_SECONDS)
    agent, _ = make_agent("agent-a", queue)
    reviewer = make_reviewer("alice", queue)
    worker_env = {"FAULT_ATTEMPT_LEASE_SECONDS": str(LEASE_SECONDS), "WEBHOOK_TIMEOUT_SECONDS": "20"}
    first = CeleryWorker("first", **worker_env).start()
    second: CeleryWorker | None = None
    with Receiver() as receiver:
        try:
            first.wait_ready()
            request, _ = transitions.create_request(
                agent=agent,
                queue_slug=queue.slug,
                message="Approve?",
                mode="form",
                requested_schema=FORM_SCHEMA,
                callback_url=receiver.url,
            )
            transitions.claim_request(request.pk, user=reviewer)
            transitions.respond(request.pk, user=reviewer, action="accept", content={"approve": True})

            assert receiver.first_arrived.wait(timeout=60), first.logs()
            first.kill()  # SIGKILL while its POST is in flight
            receiver.release.set()
            second = CeleryWorker("second", **worker_env).start().wait_ready()

            # What celery beat's retry_due_webhooks does every 15 s, run here until the delivery lands.
            delivery = WebhookDelivery.objects.get(event__agent=agent)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                delivery.refresh_from_db()
                if delivery.status != DeliveryStatus.PENDING:
                    break
                tasks.retry_due_webhooks()
                time.sleep(0.5)
        finally:
            first.kill()
            if second is not None:
                second.stop()

    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.DELIVERED, (
        delivery.status,
        delivery.last_error,
        second and second.logs(),
    )
    assert delivery.delivered_at is not None
    assert set(receiver.seen) == {str(delivery.pk)}  # every POST carried the one delivery id
    assert len(receiver.seen) >= 2  # the killed attempt and the one that landed
    assert Counter(receiver.answered) == {str(delivery.pk): 1}  # answered, so completed, exactly once
    assert second is not None and "deliver_webhook" in second.logs()  # the replacement worker delivered it
