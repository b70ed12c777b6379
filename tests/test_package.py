"""`pip install reviewhub`: the wheel built from this checkout carries what ReviewHub needs besides its code
(templates, static files, migrations, the MCP schema), and its `reviewhub` command runs the demo outside the checkout.

The wheel is built from a copy of what git sees of the checkout, so the build leaves no `build/` or egg-info here.
It is installed with its dependencies into a fresh virtual environment (about a minute from the machine's package
index and pip cache): the point is that nothing of the checkout or of .venv is needed."""

import re
import shutil
import signal
import subprocess
import sys
import time
import tomllib
import zipfile
from pathlib import Path

import httpx
import pytest
from setuptools import find_packages

from tests.answers import answer_of
from tests.delivery.liveserver import READY_BOUND_SECONDS, answer_through_api, free_port

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
# What the build reads: pyproject.toml's packages, package-dir and readme.
BUILD_INPUTS = [
    "pyproject.toml",
    "README.md",
    "reviewhub",
    "elicitation",
    "reviewhub_client",
    "templates",
    "static",
]


def files_git_sees(*paths: str) -> list[str]:
    """Tracked and new files under `paths`, not ignored ones (no __pycache__, databases, egg-info)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *paths],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return sorted(name for name in listed.split("\0") if name and (REPO / name).is_file())


def test_the_package_list_names_every_package_in_the_checkout() -> None:
    # The list is explicit (templates/ and static/ are mapped into it), so a new package must be added by hand.
    on_disk = find_packages(str(REPO), include=["reviewhub", "reviewhub.*", "elicitation", "elicitation.*"])
    on_disk += find_packages(str(REPO), include=["reviewhub_client", "reviewhub_client.*"])
    listed = PYPROJECT["tool"]["setuptools"]["packages"]

    assert sorted(set(on_disk) - set(listed)) == []
    assert PYPROJECT["tool"]["setuptools"]["package-dir"] == {
        "reviewhub.templates": "templates",
        "reviewhub.static": "static",
    }


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = tmp_path_factory.mktemp("source")
    for name in files_git_sees(*BUILD_INPUTS):
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, source / name)
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(dist), str(source)],
        check=True,
    )
    (built,) = dist.glob("reviewhub-*.whl")
    return built


@pytest.mark.slow
def test_the_wheel_carries_templates_static_files_migrations_and_the_mcp_schema(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        (entry_points,) = [name for name in names if name.endswith(".dist-info/entry_points.txt")]
        scripts = archive.read(entry_points).decode()
    # Hidden files (static/reviewhub/.keep) are placeholders, not pages or assets: package-data's globs skip them.
    site_files = {
        f"reviewhub/{name}"
        for name in files_git_sees("templates", "static")
        if not any(part.startswith(".") for part in Path(name).parts)
    }
    migrations = set(files_git_sees("elicitation/migrations"))

    assert (
        "reviewhub/templates/base.html" in site_files
        and "reviewhub/static/reviewhub/reviewhub.css" in site_files
    )
    assert site_files - names == set()
    assert "elicitation/migrations/0001_initial.py" in migrations
    assert migrations - names == set()
    assert "elicitation/queue/mcp_elicitation_schema.json" in names
    assert re.search(r"^reviewhub = reviewhub\.cli:main$", scripts, re.MULTILINE), scripts


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment holding the wheel and its dependencies, and nothing of the checkout."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([venv / "bin" / "python", "-m", "pip", "install", "--quiet", str(wheel)], check=True)
    return venv


def outside_env(venv: Path, home: Path) -> dict[str, str]:
    """A clean environment: none of this test run's settings, database or Redis, no PYTHONPATH into the checkout."""
    return {
        "PATH": f"{venv / 'bin'}:/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
    }


class ServingCommand:
    """A `reviewhub` command that serves, logging to a file; stopped (and reaped) by the context manager."""

    def __init__(self, command: list[str | Path], cwd: Path, env: dict[str, str], port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.log = cwd / f"reviewhub-{port}.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_healthy(self) -> None:
        """Until /healthz answers 200 or the command exits; READY_BOUND_SECONDS is a net for a hang, not a deadline."""
        give_up = time.monotonic() + READY_BOUND_SECONDS
        while time.monotonic() < give_up:
            if self.process.poll() is not None:
                raise AssertionError(f"reviewhub exited with {self.process.returncode}:\n{self.output()}")
            try:
                if httpx.get(self.url + "/healthz", timeout=10).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"reviewhub did not answer within {READY_BOUND_SECONDS:.0f} s:\n{self.output()}")

    def __enter__(self) -> "ServingCommand":
        return self

    def __exit__(self, *exc: object) -> None:
        # `reviewhub demo` and `serve` exec the server, so this pid is uvicorn's: SIGTERM is its graceful stop.
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """A working directory outside the checkout."""
    directory = tmp_path / "elsewhere"
    directory.mkdir()
    assert not directory.is_relative_to(REPO)
    return directory


@pytest.mark.slow
def test_an_installed_reviewhub_runs_the_demo_outside_the_checkout(installed: Path, elsewhere: Path) -> None:
    env = outside_env(installed, elsewhere)
    command = installed / "bin" / "reviewhub"
    data_dir = elsewhere / "data"

    printed = subprocess.run([command, "--version"], env=env, cwd=elsewhere, capture_output=True, text=True)
    assert printed.stdout.strip() == f"reviewhub {PYPROJECT['project']['version']}", printed
    # The code, templates and static files all come from the virtual environment.
    where = subprocess.run(
        [command, "manage", "--data-dir", data_dir, "shell", "-c",
         "import reviewhub; from django.conf import settings; "
         "print(reviewhub.__file__, settings.TEMPLATES[0]['DIRS'][0], settings.STATICFILES_DIRS[0])"],
        env=env, cwd=elsewhere, capture_output=True, text=True,
    )  # fmt: skip
    assert where.returncode == 0, where.stderr
    code, templates, static = where.stdout.split()[-3:]
    site_packages = next((installed / "lib").glob("python3.*/site-packages"))
    assert Path(code) == site_packages / "reviewhub" / "__init__.py"
    assert (Path(templates), Path(static)) == (
        site_packages / "reviewhub/templates",
        site_packages / "reviewhub/static",
    )

    port = free_port()
    with ServingCommand(
        [command, "demo", "--port", str(port), "--data-dir", data_dir], elsewhere, env, port
    ) as demo:
        demo.wait_healthy()
        output = demo.output()
        agent_key = re.search(r"^AGENT_KEY=(\S+)$", output, re.MULTILINE)
        reviewer_token = re.search(r"^REVIEWER_TOKEN=(\S+)$", output, re.MULTILINE)
        assert agent_key and reviewer_token, output
        agent = {"Authorization": f"Bearer {agent_key.group(1)}"}
        with httpx.Client(base_url=demo.url, timeout=30) as http:
            css = http.get("/static/reviewhub/reviewhub.css")
            debug_page = http.get("/no-such-page/")
            created = http.post(
                "/api/v1/requests",
                headers={**agent, "Idempotency-Key": "installed-demo"},
                json={
                    "queue": "default",
                    "message": "Ship the installed build?",
                    "requestedSchema": {
                        "type": "object",
                        "properties": {"approve": {"type": "boolean", "title": "Approve"}},
                        "required": ["approve"],
                    },
                },
            )
            assert created.status_code == 201, created.text
            request_id = created.json()["id"]
            answer_through_api(demo.url, reviewer_token.group(1), request_id, content={"approve": True})
            answered = http.get(f"/api/v1/requests/{request_id}", headers=agent)

    assert f"ReviewHub on http://127.0.0.1:{port}/" in output
    assert "Using the URLconf" in debug_page.text  # the demo runs with DEBUG on, as `make run`
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    assert css.content == (REPO / "static/reviewhub/reviewhub.css").read_bytes()
    assert answered.json()["status"] == "completed"
    assert answer_of(answered.json()["result"]) == {"action": "accept", "content": {"approve": True}}
    assert (data_dir / "reviewhub.sqlite3").is_file() and (data_dir / "demo-credentials.json").is_file()

    # `reviewhub serve` in the same data directory serves the demo's data, with DEBUG off (its default): WhiteNoise
    # serves the static files from the installed package, not Django's DEBUG-only view.
    port = free_port()
    with ServingCommand(
        [command, "serve", "--port", str(port), "--data-dir", data_dir], elsewhere, env, port
    ) as server:
        server.wait_healthy()
        with httpx.Client(base_url=server.url, timeout=30) as http:
            script = http.get("/static/reviewhub/reviewhub.js")
            missing = http.get("/no-such-page/")
            kept = http.get(f"/api/v1/requests/{request_id}", headers=agent)

    assert "Using the URLconf" not in missing.text  # Django's DEBUG page; the demo showed it
    assert script.status_code == 200
    assert script.content == (REPO / "static/reviewhub/reviewhub.js").read_bytes()
    assert kept.json()["status"] == "completed"
