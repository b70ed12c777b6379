"""The request page's script is a native ES module split by concern (static/reviewhub/request/): the page preloads
every module it imports, so they are fetched in one round trip rather than one per level of imports."""

import re
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

pytestmark = pytest.mark.django_db

STATIC = Path(settings.BASE_DIR) / "static" / "reviewhub"
IMPORT = re.compile(r'^import [^;]*? from "(\./[^"]+\.js)";', re.MULTILINE | re.DOTALL)


def imported_modules(entry: Path) -> set[str]:
    """Every module `entry` reaches through static imports, as paths under static/reviewhub/."""
    found: set[str] = set()
    waiting = [entry]
    while waiting:
        module = waiting.pop()
        for target in IMPORT.findall(module.read_text()):
            path = (module.parent / target).resolve()
            name = path.relative_to(STATIC).as_posix()
            if name not in found:
                found.add(name)
                waiting.append(path)
    return found


def test_the_request_page_loads_its_script_as_a_module_and_preloads_every_import(
    login: Any, reviewer: Any, make_request: Any
) -> None:
    html = login(reviewer).get(f"/requests/{make_request().pk}/").content.decode()

    preloaded = set(re.findall(r'<link rel="modulepreload" href="/static/reviewhub/([^"]+)">', html))
    assert '<script type="module" src="/static/reviewhub/request.js"></script>' in html
    assert preloaded == imported_modules(STATIC / "request.js")
    assert preloaded == {path.relative_to(STATIC).as_posix() for path in (STATIC / "request").glob("*.js")}
