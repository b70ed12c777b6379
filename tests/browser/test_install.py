"""Install to the home screen: every reviewer page links the web app manifest; the manifest parses with a name,
start URL, display mode and icons; each icon is served with its declared type and size and is still the render of
the project's own SVG; the start URL is inside the app and opens the dashboard for a signed-in reviewer; and
Chromium itself (DevTools protocol) parses the manifest without errors and finds the page installable."""

import base64
import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import expect

from elicitation.models import Queue
from tests.browser import icons
from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS, session_cookie

pytestmark = pytest.mark.browser

REVIEWER_PAGES = ["/", "/queues/payments/", "/history/", "/preferences/"]
REQUIRED = ("name", "short_name", "start_url", "display", "icons")
# The distance (0-255 per channel, averaged over the icon) a shipped PNG may drift from a fresh render of its
# SVG: anti-aliasing differs a little between Chromium builds; a different drawing is far above it.
MAX_MEAN_DRIFT = 3.0


@pytest.fixture
def reviewer(asgi_live_server_url: str) -> User:
    queue = Queue.objects.create(slug="payments", name="Payments")
    user = User.objects.create_user("alice", password="pw-alice")
    queue.members.add(user)
    return user


def png_size(body: bytes) -> tuple[int, int]:
    assert body[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert body[12:16] == b"IHDR"
    width, height = struct.unpack(">II", body[16:24])
    return int(width), int(height)


def manifest_of(page: Any) -> tuple[str, dict[str, Any]]:
    link = page.locator("link[rel=manifest]")
    expect(link).to_have_count(1)
    url = urljoin(page.url, link.get_attribute("href"))
    response = page.request.get(url)
    assert response.status == 200
    assert response.headers["content-type"].split(";")[0] in ("application/manifest+json", "application/json")
    return url, dict(json.loads(response.body()))


def test_every_reviewer_page_links_the_manifest(open_page: Callable[..., Any], reviewer: User) -> None:
    page = open_page(reviewer, "")
    urls = set()
    for path in REVIEWER_PAGES:
        response = page.goto(path)
        assert response is not None and response.status == 200, path
        urls.add(manifest_of(page)[0])
        expect(page.locator("link[rel=apple-touch-icon]")).to_have_count(1)
        expect(page.locator("meta[name=theme-color]")).to_have_count(1)
    assert len(urls) == 1  # one manifest for the whole app


def test_the_manifest_its_icons_and_its_start_url(
    open_page: Callable[..., Any], reviewer: User, asgi_live_server_url: str
) -> None:
    page = open_page(reviewer, "/")
    manifest_url, manifest = manifest_of(page)
    for key in REQUIRED:
        assert manifest.get(key), f"manifest lacks {key}"
    assert manifest["display"] in ("standalone", "fullscreen", "minimal-ui")
    assert len(manifest["short_name"]) <= 12  # fits under a home-screen icon

    origin = urlsplit(asgi_live_server_url)
    start = urlsplit(urljoin(manifest_url, manifest["start_url"]))
    scope = urljoin(manifest_url, manifest.get("scope", "."))
    assert (start.scheme, start.netloc) == (origin.scheme, origin.netloc)
    assert start.geturl().startswith(scope)

    declared = {icon["src"]: icon for icon in manifest["icons"]}
    pngs = [icon for icon in declared.values() if icon["type"] == "image/png"]
    assert any(icon["sizes"] == "192x192" for icon in pngs) and any(
        icon["sizes"] == "512x512" for icon in pngs
    )
    assert any("maskable" in icon.get("purpose", "").split() for icon in pngs)
    for src, icon in declared.items():
        response = page.request.get(urljoin(manifest_url, src))
        assert response.status == 200, src
        assert response.headers["content-type"].split(";")[0] == icon["type"], src
        body = response.body()
        if icon["type"] == "image/png":
            width, height = (int(edge) for edge in icon["sizes"].split("x"))
            assert png_size(body) == (width, height), src
        else:
            assert icon["sizes"] == "any" and b"<svg" in body, src

    # The start URL opens the app itself for a signed-in reviewer, not a sign-in page or an error.
    response = page.goto(start.geturl())
    assert response is not None and response.status == 200
    assert urlsplit(page.url).path == start.path
    expect(page).to_have_title("Queues · ReviewHub")


def test_the_start_url_asks_a_stranger_to_sign_in_inside_the_app(
    open_page: Callable[..., Any], asgi_live_server_url: str
) -> None:
    page = open_page(None, "/")
    assert urlsplit(page.url).path == "/accounts/login/"
    manifest_of(page)  # the sign-in page links it too, so a phone can install from there


def test_chromium_parses_the_manifest_and_finds_the_page_installable(
    browser: Any,
    reviewer: User,
    asgi_live_server_url: str,
    tmp_path: Path,
    screenshot: Callable[[Any, str], Any],
) -> None:
    # A profile on disk: Chromium refuses to install from an incognito context (Playwright's usual kind),
    # which would be the only error reported.
    context = browser.browser_type.launch_persistent_context(
        str(tmp_path / "profile"),
        executable_path=CHROMIUM,
        args=CHROMIUM_ARGS,
        headless=True,
        base_url=asgi_live_server_url,
    )
    try:
        context.add_cookies([session_cookie(reviewer, asgi_live_server_url)])
        page = context.new_page()
        page.goto("/")
        expect(page).to_have_title("Queues · ReviewHub")
        cdp = context.new_cdp_session(page)
        parsed = cdp.send("Page.getAppManifest")
        assert parsed["url"].endswith("/manifest.json")
        assert parsed["errors"] == [], parsed["errors"]
        installability = cdp.send("Page.getInstallabilityErrors")["installabilityErrors"]
        assert installability == [], installability
        screenshot(page, "install-dashboard")
        # The check is live: the same manifest without its icons is refused for them...
        served = json.loads(page.request.get(parsed["url"]).body())
        page.route(
            "**/manifest.json",
            lambda route: route.fulfill(
                status=200, content_type="application/json", body=json.dumps({**served, "icons": []})
            ),
        )
        page.goto("/history/")
        refused = [
            error["errorId"] for error in cdp.send("Page.getInstallabilityErrors")["installabilityErrors"]
        ]
        assert "manifest-missing-suitable-icon" in refused, refused
        page.unroute("**/manifest.json")
        # ...and a page of ours without the manifest link is not installable at all.
        page.goto("/healthz")
        control = cdp.send("Page.getInstallabilityErrors")["installabilityErrors"]
        assert "no-manifest" in [error["errorId"] for error in control], control
    finally:
        context.close()


def test_the_shipped_pngs_are_renders_of_the_projects_svg(browser: Any) -> None:
    """Regenerate with `python -m tests.browser.icons` after changing an SVG."""
    context = browser.new_context()
    try:
        page = context.new_page()
        page.set_content("<canvas id=c></canvas>")
        for png, (svg, size) in icons.RENDERS.items():
            shipped = (icons.STATIC / png).read_bytes()
            assert png_size(shipped) == (size, size), png
            fresh = icons.render_png(browser, svg, size)
            drift = page.evaluate(
                """async ([a, b, size]) => {
                  const pixels = async (b64) => {
                    const image = new Image();
                    image.src = "data:image/png;base64," + b64;
                    await image.decode();
                    const canvas = new OffscreenCanvas(size, size);
                    const ctx = canvas.getContext("2d");
                    ctx.drawImage(image, 0, 0);
                    return ctx.getImageData(0, 0, size, size).data;
                  };
                  const [x, y] = [await pixels(a), await pixels(b)];
                  let total = 0;
                  for (let i = 0; i < x.length; i++) total += Math.abs(x[i] - y[i]);
                  return total / x.length;
                }""",
                [_b64(shipped), _b64(fresh), size],
            )
            assert drift <= MAX_MEAN_DRIFT, f"{png} is not the render of {svg} (mean drift {drift:.1f})"
    finally:
        context.close()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
