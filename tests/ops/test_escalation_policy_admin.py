"""The escalation policy's admin form sets what T2 does to a claimed request (keep, notify, move)."""

import re

from django.contrib.auth.models import User
from django.test import Client

from elicitation.models import ClaimedAtT2, EscalationPolicy, Queue


def test_the_admin_sets_what_t2_does_to_a_claimed_request(queue: Queue) -> None:
    staff = User.objects.create_superuser("root", password="pw-root")
    client = Client()
    client.force_login(staff)
    form = client.get("/admin/elicitation/escalationpolicy/add/").content.decode()
    for choice in ClaimedAtT2.values:
        assert f'name="claimed_at_t2" value="{choice}"' in form
    assert re.search(r'value="notify"[^>]*checked', form)  # the default
    assert "acknowledgement" in form  # the T2 fieldset says what a claim does

    response = client.post(
        "/admin/elicitation/escalationpolicy/add/",
        {
            "queue": queue.pk,
            "unclaimed_after_seconds": "60",
            "unanswered_after_seconds": "120",
            "unanswered_goes_to": "escalation_queue",
            "claimed_at_t2": "keep",
        },
    )
    assert response.status_code == 302
    assert EscalationPolicy.objects.get(queue=queue).claimed_at_t2 == ClaimedAtT2.KEEP

    refused = client.post(
        f"/admin/elicitation/escalationpolicy/{EscalationPolicy.objects.get(queue=queue).pk}/change/",
        {"queue": queue.pk, "unanswered_goes_to": "escalation_queue", "claimed_at_t2": "shrug"},
    )
    assert refused.status_code == 200  # the form again, with the error
    assert EscalationPolicy.objects.get(queue=queue).claimed_at_t2 == ClaimedAtT2.KEEP
