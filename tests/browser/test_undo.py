# ruff: noqa: F811  (the `team` fixture is shared with test_reviewer_pages by import)
"""Undo on the request page, on a server with the 5-second window (ANSWER_UNDO_SECONDS=5): within the window the
agent is told nothing and Undo brings the form back; after it the agent gets the answer; with undo turned off in
the reviewer's preferences the answer goes at once."""

import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from elicitation.models import ReviewerReach
from tests.browser.conftest import WAIT_MS, AgentAPI, session_cookie
from tests.browser.test_reviewer_pages import NOTE_SCHEMA, form_request, team, wait_live  # noqa: F401
from tests.delivery.liveserver import LiveServer

pytestmark = pytest.mark.browser

WINDOW_SECONDS = 5


@pytest.fixture(scope="module")
def undo_server(django_db_setup: None) -> Iterator[str]:
    # The held answer is sent by a timer (embedded: eager tasks) or a Celery countdown; with a broker and no worker
    # (the services leg) the sweep that backs both up sends it, so this server sweeps in process.
    server = LiveServer(
        env={
            "ANSWER_UNDO_SECONDS": str(WINDOW_SECONDS),
            "PERIODIC_SWEEPS_IN_PROCESS": "true",
            "SWEEP_INTERVAL_SECONDS": "1",
        }
    )
    server.env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def open_undo_page(browser: Any, undo_server: str, transactional_db: None) -> Iterator[Any]:
    contexts: list[Any] = []

    def open_one(user: Any, path: str) -> Any:
        context = browser.new_context(base_url=undo_server, viewport={"width": 1280, "height": 860})
        context.set_default_timeout(WAIT_MS)
        contexts.append(context)
        context.add_cookies([session_cookie(user, undo_server)])
        page = context.new_page()
        page.goto(path)
        return page

    yield open_one
    for context in contexts:
        context.close()


def events_of(agent: AgentAPI) -> list[dict[str, Any]]:
    response = httpx.get(
        f"{agent.base_url}/api/v1/events?after=0",
        headers={"Authorization": f"Bearer {agent.key}"},
        timeout=10,
    )
    assert response.status_code == 200, response.text
    return list(response.json()["events"])


def answer_first_of_two(open_undo_page: Any, team: dict[str, Any], agent: AgentAPI) -> tuple[Any, dict, dict]:
    first = form_request(agent, NOTE_SCHEMA, "Drop the staging orders table?", priority=5)
    second = form_request(agent, NOTE_SCHEMA, "Rotate the staging key?")
    page = open_undo_page(team["alice"], "/queues/payments/")
    wait_live(page)
    page.keyboard.press("n")
    expect(page).to_have_url(re.compile(f"/requests/{first['id']}/$"))
    wait_live(page)
    page.get_by_label("Note").fill("after the backup")
    page.locator("#approve-button").click()
    expect(page).to_have_url(re.compile(f"/requests/{second['id']}/$"))  # the next request opens at once
    return page, first, second


def test_undo_within_the_window_tells_the_agent_nothing_and_brings_the_form_back(
    open_undo_page, team, undo_server, screenshot
) -> None:
    agent = AgentAPI(undo_server, team["key"])
    page, first, _ = answer_first_of_two(open_undo_page, team, agent)
    banner = page.locator("[data-undo-banner]")
    expect(banner).to_contain_text("Approved")
    expect(banner).to_contain_text("Drop the staging orders table?")
    expect(banner).to_contain_text(re.compile(r"The agent is told in [1-5] s"))
    screenshot(page, "undo-banner")
    assert agent.get(first["id"])["status"] == "claimed"
    assert events_of(agent) == []
    page.keyboard.press("u")
    expect(page).to_have_url(re.compile(f"/requests/{first['id']}/$"))
    expect(page.locator(".flash")).to_contain_text("Undone: the agent was told nothing.")
    expect(page.get_by_label("Note")).to_have_value("after the backup")
    expect(page.locator("#holder-text")).to_contain_text("You hold this request")
    screenshot(page, "undo-form-back")
    time.sleep(WINDOW_SECONDS + 1)  # past where the window would have closed: still nothing told
    assert agent.get(first["id"])["status"] == "claimed"
    assert events_of(agent) == []


def test_after_the_window_the_agent_gets_the_answer(open_undo_page, team, undo_server) -> None:
    agent = AgentAPI(undo_server, team["key"])
    started = time.monotonic()
    page, first, _ = answer_first_of_two(open_undo_page, team, agent)
    banner = page.locator("[data-undo-banner]")
    expect(banner).to_contain_text("Sent: the agent has been told.", timeout=(WINDOW_SECONDS + 3) * 1000)
    expect(banner.locator("[data-undo]")).to_have_count(0)
    deadline = time.monotonic() + 10
    while agent.get(first["id"])["status"] != "completed" and time.monotonic() < deadline:
        time.sleep(0.2)
    result = agent.get(first["id"])
    assert result["status"] == "completed", result
    assert result["result"]["content"] == {"approve": True, "note": "after the backup"}
    assert time.monotonic() - started >= WINDOW_SECONDS
    events = events_of(agent)
    assert len(events) == 1 and str(first["id"]) in str(events[0]), events


def test_with_undo_off_in_preferences_the_answer_is_sent_at_once(open_undo_page, team, undo_server) -> None:
    agent = AgentAPI(undo_server, team["key"])
    page = open_undo_page(team["alice"], "/preferences/")
    page.get_by_label(re.compile("Hold my answers 5 seconds")).uncheck()
    page.locator("#save-preferences").click()
    expect(page.get_by_label(re.compile("Hold my answers 5 seconds"))).not_to_be_checked()
    assert ReviewerReach.objects.get(user=team["alice"]).answer_undo is False
    page, first, _ = answer_first_of_two(open_undo_page, team, agent)
    expect(page.locator("[data-undo-banner]")).to_have_count(0)
    assert agent.get(first["id"])["status"] == "completed"
