"""Browser tests: a live ASGI server (daphne, in a subprocess) on the test database, and headless Chromium.

The server is its own process with its own in-memory channel layer, so live pushes only happen for changes
made *through the server*: drive agent and reviewer actions over HTTP (`agent_api`, `reviewer_api`), never by
calling services in the test process. Data the test creates directly (queues, users, agents) must be committed:
every browser test uses the `transactional_db` fixture (pulled in by `asgi_live_server_url`).

Fixtures for others to reuse: `asgi_live_server_url`, `browser`, `open_page` (a logged-in page factory),
`agent_api`, `reviewer_api`, `screenshot`.
"""

import os
import socket
import subprocess
import sys
import time
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
SERVER_START_SECONDS = 90  # generous: a loaded CI box can take long to import Django
ASYNC_UNSAFE = "DJANGO_ALLOW_ASYNC_UNSAFE"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _server_environment() -> dict[str, str]:
    """The test process's settings, pointed at the test database (pytest-django renamed it at setup)."""
    env = {k: v for k, v in os.environ.items() if k != ASYNC_UNSAFE}
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        name = str(db["NAME"])
        if name == ":memory:" or "mode=memory" in name:
            pytest.skip("browser tests need a file SQLite test database (set SQLITE_TEST_PATH)")
        env["SQLITE_PATH"] = name
        env.pop("DATABASE_URL", None)
    else:
        user = db.get("USER") or ""
        password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
        at = "@" if user else ""
        env["DATABASE_URL"] = (
            f"postgres://{user}{password}{at}{db['HOST']}:{db.get('PORT') or 5432}/{db['NAME']}"
        )
    # Sweeps in the server would race the tests' own timing; tests drive transitions explicitly.
    env["PERIODIC_SWEEPS_IN_PROCESS"] = "false"
    env.setdefault("LOG_LEVEL", "WARNING")
    return env


@pytest.fixture(scope="session")
def _asgi_server(django_db_setup: None) -> Iterator[str]:
    port = _free_port()
    OUTPUT.mkdir(parents=True, exist_ok=True)
    log_path = OUTPUT / "browser-server.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "reviewhub.serve",
                "-b",
                "127.0.0.1",
                "-p",
                str(port),
                "reviewhub.asgi:application",
            ],
            cwd=settings.BASE_DIR,
            env=_server_environment(),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            give_up = time.monotonic() + SERVER_START_SECONDS
            while True:
                if process.poll() is not None:
                    raise RuntimeError(f"the ASGI server exited at start; see {log_path}")
                try:
                    if httpx.get(f"{url}/healthz", timeout=1).status_code < 500:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > give_up:
                    raise RuntimeError(f"the ASGI server did not answer within {SERVER_START_SECONDS}s")
                time.sleep(0.1)
            yield url
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


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
        context.set_default_timeout(5000)
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
