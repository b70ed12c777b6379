"""The home-screen icons are drawn as SVG (static/reviewhub/icon.svg, icon-maskable.svg) and rendered to PNG by
Chromium: `python -m tests.browser.icons` rewrites the PNGs, and tests/browser/test_install.py checks the shipped
PNGs still match a fresh render of their SVG."""

import base64
import sys
from pathlib import Path
from typing import Any

STATIC = Path(__file__).resolve().parents[2] / "static" / "reviewhub"
CHROMIUM = "/usr/bin/chromium"

# PNG file → (SVG it is drawn from, edge in pixels).
RENDERS: dict[str, tuple[str, int]] = {
    "icon-192.png": ("icon.svg", 192),
    "icon-512.png": ("icon.svg", 512),
    "icon-maskable-512.png": ("icon-maskable.svg", 512),
    "apple-touch-icon.png": ("icon-maskable.svg", 180),
}


def svg_data_url(svg: str) -> str:
    return "data:image/svg+xml;base64," + base64.b64encode((STATIC / svg).read_bytes()).decode()


def render_png(browser: Any, svg: str, size: int) -> bytes:
    """The SVG drawn at size x size by Chromium, transparent where the SVG draws nothing."""
    context = browser.new_context(viewport={"width": size, "height": size}, device_scale_factor=1)
    try:
        page = context.new_page()
        page.set_content(
            '<html><body style="margin:0;background:transparent">'
            f'<img id="icon" src="{svg_data_url(svg)}" width="{size}" height="{size}" style="display:block">'
            "</body></html>"
        )
        page.wait_for_function("document.getElementById('icon').complete")
        png: bytes = page.screenshot(
            omit_background=True, clip={"x": 0, "y": 0, "width": size, "height": size}
        )
        return png
    finally:
        context.close()


def main() -> int:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"], headless=True)
        for png, (svg, size) in RENDERS.items():
            (STATIC / png).write_bytes(render_png(browser, svg, size))
            print(f"{png}: {size}x{size} from {svg}")
        browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
