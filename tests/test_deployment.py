"""The deployment description parses and names only commands that exist in the project."""

import importlib
import json
import re
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml
from django.core.management import get_commands
from django.http.request import validate_host

from reviewhub.cli import ASGI_APPLICATION, SERVER_OPTIONS

ROOT = Path(__file__).resolve().parent.parent


def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's `${VAR}`, `${VAR:-default}` (nested defaults too) and `${VAR:?message}`, as `docker compose` reads
    the file with `env` as its environment."""
    result, index = [], 0
    while index < len(text):
        if text.startswith("$$", index):
            result.append("$")
            index += 2
        elif text.startswith("${", index):
            depth, end = 1, index + 2
            while depth:
                depth += {"{": 1, "}": -1}.get(text[end], 0)  # a brace opens only after `$` here
                end += 1
            match = re.fullmatch(r"(\w+)(?:(:-|:\?)(.*))?", text[index + 2 : end - 1], re.S)
            assert match is not None, text
            name, operator, operand = match.groups()
            value = env.get(name, "")
            if not value and operator == ":-":
                value = interpolate(operand, env)
            elif not value and operator == ":?":
                raise KeyError(f"{name}: {operand}")
            result.append(value)
            index = end
        else:
            result.append(text[index])
            index += 1
    return "".join(result)


SECRETS = {"SECRET_KEY": "s", "API_KEY_PEPPER": "p", "FLOW_ENCRYPTION_KEYS": "k1:key"}


def web_environment(env: dict[str, str]) -> dict[str, str]:
    """The web container's environment when `docker compose up` runs with `env`."""
    return {
        name: interpolate(str(value), env)
        for name, value in compose()["services"]["web"]["environment"].items()
    }


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
        elif program == "python":  # the web server
            assert command == server_command("0.0.0.0", 8000), command
        elif program == "celery":
            app = importlib.import_module(command[2]).celery_app
            assert command[3] in ("worker", "beat")
            assert "elicitation.ops.tasks.expire_overdue_requests" in {
                entry["task"] for entry in app.conf.beat_schedule.values()
            }
        else:
            raise AssertionError(f"unexpected program {program} in {name}")


def server_command(host: str, port: int) -> list[str]:
    """uvicorn on reviewhub/cli.py's application and options: what `reviewhub serve` runs."""
    module, _, attribute = ASGI_APPLICATION.partition(":")
    assert hasattr(importlib.import_module(module), attribute)
    listen = ["--host", host, "--port", str(port)]
    return ["python", "-m", "uvicorn", ASGI_APPLICATION, *listen, *SERVER_OPTIONS]


def test_the_image_make_run_and_compose_serve_with_the_same_options() -> None:
    image_command = re.search(r"^CMD (.+)$", (ROOT / "Dockerfile").read_text(), re.M)
    assert image_command is not None
    assert json.loads(image_command.group(1)) == server_command("0.0.0.0", 8000)
    make_options = re.search(r"^SERVER_OPTIONS = (.+)$", (ROOT / "Makefile").read_text(), re.M)
    assert make_options is not None and make_options.group(1).split() == SERVER_OPTIONS
    assert "$(SERVER_OPTIONS)" in (ROOT / "Makefile").read_text()


def test_the_image_copies_what_the_project_needs() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    for part in ("reviewhub", "elicitation", "templates", "static", "manage.py"):
        assert f"COPY {part}" in dockerfile
        assert (ROOT / part).exists()


def test_make_test_services_gives_the_service_urls_to_the_whole_recipe() -> None:
    """The URLs must reach pytest itself (the recipe exports them), or the "services" leg quietly tests SQLite."""
    import os
    import subprocess

    make = shutil.which("make")
    assert make is not None
    env = {key: value for key, value in os.environ.items() if key not in ("DATABASE_URL", "REDIS_URL")}
    result = subprocess.run(
        [
            *(make, "-s", "-o", "browser", "-o", ".venv/.installed"),
            *("-o", "clients/typescript/node_modules/.installed"),
            *("test-services", "SERVICES_PYTEST=true; env"),
        ],
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


def test_interpolation_reads_defaults_as_compose_does() -> None:
    assert interpolate("${A:-x}-${B:-${C:-y}}-$$D", {"C": "c"}) == "x-c-$D"
    assert interpolate("${A:-x}", {"A": "a"}) == "a"


def test_the_web_healthcheck_asks_for_a_host_allowed_hosts_allows() -> None:
    """Django answers 400 to a Host ALLOWED_HOSTS does not list: the healthcheck asks for PUBLIC_URL's host (its
    request goes to the container's own port), and by default PUBLIC_URL's host is allowed."""
    web = compose()["services"]["web"]
    [check] = [part for part in web["healthcheck"]["test"] if "urlopen" in part]
    assert "'http://127.0.0.1:8000/healthz'" in check and web["command"] == server_command("0.0.0.0", 8000)
    assert "'Host': p.urlsplit(os.environ['PUBLIC_URL']).netloc" in check
    for env in ({}, {"PORT": "8123"}):
        environment = web_environment({**SECRETS, **env})
        host = urlsplit(environment["PUBLIC_URL"]).hostname
        assert host is not None and validate_host(host, environment["ALLOWED_HOSTS"].split(",")), env


def test_the_published_port_is_the_one_public_url_names() -> None:
    web = compose()["services"]["web"]
    for env, port in (({}, 8000), ({"PORT": "8123"}, 8123)):
        [published] = [interpolate(str(mapping), env) for mapping in web["ports"]]
        host_port, container_port = published.split(":")
        assert (int(host_port), container_port) == (port, "8000")
        assert urlsplit(web_environment({**SECRETS, **env})["PUBLIC_URL"]).port == port
