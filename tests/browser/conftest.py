"""Browser tests: a live ASGI server (uvicorn, in a subprocess) on the test database, and headless Chromium.

The server is its own process with its own in-memory channel layer, so live pushes only happen for changes
made *through the server*: drive agent and reviewer actions over HTTP (`agent_api`, `reviewer_api`), never by
calling services in the test process. Data the test creates directly (queues, users, agents) must be committed:
every browser test uses the `transactional_db` fixture (pulled in by `asgi_live_server_url`).

Fixtures for others to reuse: `asgi_live_server_url`, `browser`, `open_page` (a logged-in page factory),
`agent_api`, `reviewer_api`, `screenshot`.
"""

import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client

from elicitation.queue import accounts
from tests.delivery.liveserver import LiveServer, free_port

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
]
OUTPUT = Path(settings.BASE_DIR) / "test-output"
SCREENSHOTS = OUTPUT / "screenshots"
FAILURES = OUTPUT / "failures"
ASYNC_UNSAFE = "DJANGO_ALLOW_ASYNC_UNSAFE"
# How long Playwright waits for a page, an element or a pushed change. A passing test never waits it out, so it can be
# generous: on a loaded machine a first page load has taken over 5 s (slower, not red).
WAIT_MS = 30_000


# A second loopback origin whose pages the live server lets call its agent API (tests/browser/test_cross_origin.py).
CROSS_ORIGIN_PORT = free_port()


@pytest.fixture(scope="session")
def _asgi_server(django_db_setup: None) -> Iterator[str]:
    """The live server every browser test shares, on the test database (pytest-django renamed it at setup)."""
    if connection.vendor == "sqlite" and (
        str(connection.settings_dict["NAME"]) == ":memory:"
        or "mode=memory" in str(connection.settings_dict["NAME"])
    ):
        pytest.skip("browser tests need a file SQLite test database (set SQLITE_TEST_PATH)")
    # A second loopback origin may call the agent API (tests/browser/test_cross_origin.py).
    server = LiveServer(env={"CORS_ALLOWED_ORIGINS": f"http://127.0.0.1:{CROSS_ORIGIN_PORT}"})
    server.env.pop(ASYNC_UNSAFE, None)
    server.start()
    try:
        yield server.url
    finally:
        server.stop()
        OUTPUT.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(server.log, OUTPUT / "browser-server.log")  # beside the failures' screenshots


@pytest.fixture
def asgi_live_server_url(_asgi_server: str, transactional_db: None) -> str:
    """The live server's base URL; the test's data is committed so the server process sees it."""
    return _asgi_server


# Module-scoped: Playwright's sync API keeps an event loop running in this thread while it is open, which
# would break every asyncio test that runs after it.
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing: apt-get install chromium (or `make browser`)")
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop in this thread; the ORM calls tests make between page actions
    # are ordinary blocking calls, so Django's async-context guard must not refuse them — while the browser
    # is open only, so the flag never reaches other tests or the processes they start.
    with pytest.MonkeyPatch.context() as patch, sync_playwright() as playwright:
        patch.setenv(ASYNC_UNSAFE, "true")
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield chromium
        chromium.close()


@dataclass
class PageWatch:
    """What a page did that a test may want to forbid: JavaScript dialogs and CSP violations."""

    dialogs: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)

    @property
    def csp_violations(self) -> list[str]:
        return [text for text in self.console_errors if "Content Security Policy" in text]


def session_cookie(user: User, base_url: str) -> dict[str, Any]:
    """A logged-in session for `user`, stored in the shared database and handed to the browser as a cookie."""
    client = Client()
    client.force_login(user)
    return {
        "name": settings.SESSION_COOKIE_NAME,
        "value": client.cookies[settings.SESSION_COOKIE_NAME].value,
        "url": base_url,
    }


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.when == "call":
        item.stash[CALL_FAILED] = report.failed
    return report


CALL_FAILED = pytest.StashKey[bool]()


@pytest.fixture
def open_page(
    browser: Any, asgi_live_server_url: str, request: pytest.FixtureRequest
) -> Iterator[Callable[..., Any]]:
    """`open_page(user=None, path="/")` → a Playwright page in a fresh context (its own cookies), logged in as user.

    Each page gets `page.watch` (a PageWatch); at teardown any CSP violation fails the test.
    """
    contexts: list[Any] = []
    watches: list[PageWatch] = []

    def open_one(user: User | None = None, path: str = "/") -> Any:
        context = browser.new_context(base_url=asgi_live_server_url, viewport={"width": 1280, "height": 860})
        context.set_default_timeout(WAIT_MS)
        contexts.append(context)
        if user is not None:
            context.add_cookies([session_cookie(user, asgi_live_server_url)])
        page = context.new_page()
        watch = PageWatch()
        watches.append(watch)

        def on_dialog(dialog: Any) -> None:
            watch.dialogs.append(dialog.message)
            dialog.dismiss()

        page.on("dialog", on_dialog)
        page.on(
            "console", lambda message: message.type == "error" and watch.console_errors.append(message.text)
        )
        page.watch = watch
        if path:
            page.goto(path)
        return page

    yield open_one
    if request.node.stash.get(CALL_FAILED, False):
        # What the browser showed when the test failed, for the CI log reader.
        FAILURES.mkdir(parents=True, exist_ok=True)
        for number, context in enumerate(contexts):
            for page_number, page in enumerate(context.pages):
                stem = FAILURES / f"{request.node.name}-{number}-{page_number}"
                page.screenshot(path=f"{stem}.png", full_page=True)
                stem.with_suffix(".html").write_text(page.content())
    for context in contexts:
        context.close()
    violations = [text for watch in watches for text in watch.csp_violations]
    assert not violations, f"Content Security Policy violations: {violations}"


@dataclass
class AgentAPI:
    """An agent talking to the live server with its key, as a real one would."""

    base_url: str
    key: str

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def create(self, **body: Any) -> dict[str, Any]:
        response = httpx.post(
            f"{self.base_url}/api/v1/requests", json=body, headers=self._headers(), timeout=10
        )
        assert response.status_code == 201, response.text
        return dict(response.json())

    def get(self, request_id: str) -> dict[str, Any]:
        response = httpx.get(
            f"{self.base_url}/api/v1/requests/{request_id}", headers=self._headers(), timeout=10
        )
        assert response.status_code == 200, response.text
        return dict(response.json())

    def cancel(self, request_id: str) -> dict[str, Any]:
        response = httpx.post(
            f"{self.base_url}/api/v1/requests/{request_id}/cancel", headers=self._headers(), timeout=10
        )
        assert response.status_code == 200, response.text
        return dict(response.json())

    def report_url_complete(self, request_id: str) -> None:
        response = httpx.post(
            f"{self.base_url}/api/v1/requests/url-complete",
            json={"requestId": request_id},
            headers=self._headers(),
            timeout=10,
        )
        assert response.status_code == 202, response.text


@pytest.fixture
def agent_api(asgi_live_server_url: str) -> Callable[[str], AgentAPI]:
    def make(key: str) -> AgentAPI:
        return AgentAPI(asgi_live_server_url, key)

    return make


@pytest.fixture
def reviewer_api(asgi_live_server_url: str) -> Callable[[User], Callable[..., httpx.Response]]:
    """`reviewer_api(user)(method, path, json=None)`: the reviewer API on the live server with a reviewer token."""

    def make(user: User) -> Callable[..., httpx.Response]:
        token = accounts.create_reviewer_token(user, name="browser-test")

        def call(method: str, path: str, json: Any = None) -> httpx.Response:
            return httpx.request(
                method,
                f"{asgi_live_server_url}{path}",
                json=json,
                headers={"Authorization": f"Bearer {token}"},
                timeout=10,
            )

        return call

    return make


@pytest.fixture
def screenshot() -> Callable[[Any, str], Path]:
    def take(page: Any, name: str) -> Path:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return take
