"""`seed_scenario` plays history through the real services: valid rows, intact audit chains, and no re-run."""

from io import StringIO

from django.core.management import call_command

from elicitation.models import ElicitationRequest, RequestEvent, Status
from elicitation.queue import audit, clock


def test_a_short_scenario_leaves_a_consistent_history(db) -> None:
    real_now = clock.now
    out = StringIO()

    # A fixed Wednesday afternoon: the arrival rhythm follows the hour, so a pinned end keeps the story fixed.
    call_command("seed_scenario", days=0.25, seed=3, scale=0.4, end="2026-01-14T16:00:00Z", stdout=out)

    assert clock.now is real_now  # the simulated clock is put back
    requests = ElicitationRequest.objects.all()
    assert 15 < requests.count() < 80
    assert set(requests.values_list("status", flat=True)) <= set(Status.values)
    assert requests.filter(status=Status.COMPLETED).exists()
    assert list(audit.verify_chains()) == []
    # Arrival times are the simulated ones, matching each request's "created" audit row.
    for request in requests[:20]:
        assert request.created_at == request.events.get(kind="created").at
    assert "Supervisor login: sam" in out.getvalue()


def test_running_it_again_changes_nothing_without_reset(db) -> None:
    call_command("seed_scenario", days=0.1, seed=3, scale=0.3, end="2026-01-14T16:00:00Z", stdout=StringIO())
    before = (ElicitationRequest.objects.count(), RequestEvent.objects.count())
    out = StringIO()

    call_command("seed_scenario", days=0.1, seed=3, scale=0.3, end="2026-01-14T16:00:00Z", stdout=out)

    assert "already seeded" in out.getvalue()
    assert (ElicitationRequest.objects.count(), RequestEvent.objects.count()) == before
