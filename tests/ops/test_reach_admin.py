"""Reach's admin pages open for staff: rules, escalation policies, reviewer preferences, and the notice trail."""

import pytest
from django.contrib.auth.models import User
from django.test import Client


@pytest.mark.parametrize("model", ["reachrule", "escalationpolicy", "reviewerreach", "notice"])
def test_reach_admin_pages_open(model: str, db: None) -> None:
    staff = User.objects.create_superuser("root", password="pw-root")
    client = Client()
    client.force_login(staff)
    assert client.get(f"/admin/elicitation/{model}/").status_code == 200
    assert client.get(f"/admin/elicitation/{model}/add/").status_code == (403 if model == "notice" else 200)
