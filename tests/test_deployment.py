"""The deployment description parses and names only commands that exist in the project."""

import importlib
import shutil
from pathlib import Path
from typing import Any

import yaml
from django.core.management import get_commands

ROOT = Path(__file__).resolve().parent.parent


def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_compose_has_every_service_of_the_deployment() -> None:
    assert {"postgres", "redis", "web", "worker", "beat", "migrate"} <= set(compose()["services"])


def test_app_services_get_the_database_and_redis() -> None:
    services = compose()["services"]
    for name in ("web", "worker", "beat", "migrate"):
        env = services[name]["environment"]
        assert env["DATABASE_URL"].startswith("postgres://"), name
        assert env["REDIS_URL"].startswith("redis://"), name
        assert "SECRET_KEY" in env, name


def test_every_command_compose_runs_exists() -> None:
    services = compose()["services"]
    for name in ("web", "worker", "beat", "migrate"):
        command = services[name]["command"]
        program = command[0]
        if program == "python" and command[1] == "manage.py":
            assert command[2] in get_commands(), command
        elif program == "python":  # the web server: daphne through reviewhub/serve.py
            assert command[1:3] == ["-m", "reviewhub.serve"], command
            module, _, attribute = command[-1].partition(":")
            assert hasattr(importlib.import_module(module), attribute), command
        elif program == "celery":
            app = importlib.import_module(command[2]).celery_app
            assert command[3] in ("worker", "beat")
            assert "elicitation.ops.tasks.expire_overdue_requests" in {
                entry["task"] for entry in app.conf.beat_schedule.values()
            }
        else:
            raise AssertionError(f"unexpected program {program} in {name}")


def test_the_image_copies_what_the_project_needs() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    for part in ("reviewhub", "elicitation", "templates", "static", "manage.py"):
        assert f"COPY {part}" in dockerfile
        assert (ROOT / part).exists()


def test_make_test_services_gives_the_service_urls_to_the_whole_recipe() -> None:
    """The recipe is several shell commands (coverage, then its report): the URLs must reach pytest, not only the
    first command, or the "services" leg quietly tests SQLite."""
    import os
    import subprocess

    make = shutil.which("make")
    assert make is not None
    env = {key: value for key, value in os.environ.items() if key not in ("DATABASE_URL", "REDIS_URL")}
    result = subprocess.run(
        [make, "-s", "-o", "browser", "-o", ".venv/.installed", "test-services", "COVERED_PYTEST=true; env"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    lines = result.stdout.splitlines()
    assert "DATABASE_URL=postgres://postgres@127.0.0.1:5432/test" in lines
    assert "REDIS_URL=redis://127.0.0.1:6379/0" in lines
