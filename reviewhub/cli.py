"""The `reviewhub` command (pyproject.toml's [project.scripts]): what `make run`, `manage.py` and `celery -A reviewhub`
do, for a ReviewHub installed with pip, where there is no checkout, Makefile or manage.py.

    reviewhub demo [--host H] [--port P]       migrate, seed the demo, print doctor's warnings, serve (as `make run`)
    reviewhub serve [--host H] [--port P] [uvicorn options]
    reviewhub migrate [migrate options]
    reviewhub createuser NAME [--superuser] [options]    a reviewer (create_reviewer) or an admin (createsuperuser)
    reviewhub worker | beat [celery options]             Celery, for the services deployment (REDIS_URL)
    reviewhub manage COMMAND [options]                   any management command, as manage.py runs it

Every command takes --data-dir (default ./reviewhub-data): on the embedded default (no DATABASE_URL, no
SQLITE_PATH) the SQLite database lives there, so `reviewhub serve` after `reviewhub demo` serves the demo's data.
"""

import argparse
import os
import sys
from importlib.metadata import version
from pathlib import Path
from typing import NoReturn

from django.core.management import execute_from_command_line

DEFAULT_DATA_DIR = Path("reviewhub-data")
SQLITE_FILE = "reviewhub.sqlite3"
DEMO_CREDENTIALS_FILE = "demo-credentials.json"
# uvicorn's options wherever ReviewHub is served (`make run`, the image, docker-compose, the tests' servers): a listen
# backlog the handshakes of a reconnect storm wait in rather than being dropped unseen, and a bounded stop, after
# which open long-polls are cut and their clients retry (docs/operations.md, "The web server").
SERVER_OPTIONS = ["--backlog", "4096", "--timeout-graceful-shutdown", "10"]
ASGI_APPLICATION = "reviewhub.asgi:application"


def public_url_for(host: str, port: int) -> str:
    """The address a browser on this machine opens, as the Makefile's `run` derives it: a wildcard host is opened at
    loopback, an IPv6 one in brackets."""
    if host == "0.0.0.0":  # noqa: S104 - read, not bound
        host = "127.0.0.1"
    elif host == "::":
        host = "[::1]"
    elif ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"


def keep_data_in(data_dir: Path) -> None:
    """Point the embedded SQLite database into `data_dir`, unless the environment names a database already."""
    if os.environ.get("DATABASE_URL") or os.environ.get("SQLITE_PATH"):
        return
    data_dir.mkdir(parents=True, exist_ok=True)
    os.environ["SQLITE_PATH"] = str(data_dir / SQLITE_FILE)


def manage(arguments: list[str]) -> None:
    """One management command in this process, as manage.py runs it; a failing command exits with its status."""
    execute_from_command_line(["reviewhub manage", *arguments])


def exec_module(module: str, arguments: list[str]) -> NoReturn:
    """Become `python -m module arguments…` (the Makefile's `exec`): the server or Celery starts in a fresh process
    that owns the terminal and receives its signals, with nothing left over from the commands run before it. -P
    keeps the working directory off sys.path, so a `reviewhub/` folder there cannot stand in for the installed code."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-P", "-m", module, *arguments])  # noqa: S606 - this interpreter


def serve(host: str, port: int, uvicorn_options: list[str]) -> NoReturn:
    listen = ["--host", host.strip("[]"), "--port", str(port)]
    exec_module("uvicorn", [ASGI_APPLICATION, *listen, *SERVER_OPTIONS, *uvicorn_options])


def run_demo(arguments: argparse.Namespace) -> NoReturn:
    data_dir: Path = arguments.data_dir
    data_dir.mkdir(parents=True, exist_ok=True)
    # As `make run`: links, hosted flows and the OAuth issuer name the address served, and DEBUG is on for a demo
    # on this machine (off, doctor rightly lists every development default as an error). Either can be set.
    os.environ.setdefault("PUBLIC_URL", public_url_for(arguments.host, arguments.port))
    os.environ.setdefault("DEBUG", "true")
    manage(["migrate", "--noinput"])
    manage(["seed_demo", "--credentials-file", str(data_dir / DEMO_CREDENTIALS_FILE)])
    manage(["doctor", "--warnings-only", "--skip", "server"])
    print(
        f"ReviewHub on {os.environ['PUBLIC_URL']}/  (API docs: /api/docs/, admin: /admin/; data in {data_dir})"
    )
    serve(arguments.host, arguments.port, [])


def run_createuser(arguments: argparse.Namespace, options: list[str]) -> None:
    if arguments.superuser:
        # Prompts for the password; without a terminal, Django reads DJANGO_SUPERUSER_PASSWORD instead.
        interactive = [] if sys.stdin.isatty() else ["--noinput"]
        manage(["createsuperuser", "--username", arguments.username, *interactive, *options])
    else:
        manage(["create_reviewer", arguments.username, *options])


def run_celery(command: str, options: list[str]) -> NoReturn:
    if not os.environ.get("REDIS_URL"):
        # Without Redis the broker is in-memory: a worker would wait on a queue nothing else can reach, while the
        # embedded server already runs every task and sweep itself.
        sys.exit(
            f"reviewhub {command} needs REDIS_URL (the Celery broker); the embedded default runs tasks in the server."
        )
    exec_module("celery", ["-A", "reviewhub", command, *options])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="reviewhub", description="A human-in-the-loop review queue for AI agents."
    )
    parser.add_argument("--version", action="version", version=f"reviewhub {version('reviewhub')}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--data-dir",
        type=Path,
        default=DEFAULT_DATA_DIR,
        help="Where the SQLite database (unless DATABASE_URL or SQLITE_PATH is set) and the demo credentials are "
        "kept; created if missing (default: ./reviewhub-data).",
    )
    listening = argparse.ArgumentParser(add_help=False)
    listening.add_argument("--host", default="127.0.0.1", help="Interface to listen on (default: 127.0.0.1).")
    listening.add_argument("--port", type=int, default=8000, help="Port to listen on (default: 8000).")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(
        name: str, summary: str, parents: list[argparse.ArgumentParser], passes_options: bool
    ) -> argparse.ArgumentParser:
        # Options a command does not know are passed on (to uvicorn, Celery, Django) only by the commands that say so.
        sub = commands.add_parser(
            name, help=summary, description=summary, parents=parents, allow_abbrev=False
        )
        sub.set_defaults(passes_options=passes_options)
        return sub

    add(
        "demo",
        "Migrate, seed a demo queue, reviewer and agent key, print doctor's warnings, and serve (as `make run`).",
        [common, listening],
        passes_options=False,
    )
    add(
        "serve",
        "Serve ReviewHub with uvicorn (`python -m uvicorn`); further options go to uvicorn.",
        [common, listening],
        passes_options=True,
    )
    add("migrate", "Apply database migrations; further options go to Django's migrate.", [common], True)
    createuser = add(
        "createuser",
        "Create a reviewer (create_reviewer: --queues a,b [--create-queues] [--password-file F] [--token] "
        "[--supervisor]) or, with --superuser, an admin (createsuperuser: [--email E]).",
        [common],
        passes_options=True,
    )
    createuser.add_argument("username")
    createuser.add_argument(
        "--superuser", action="store_true", help="An admin for /admin/ (Django's createsuperuser)."
    )
    add("worker", "A Celery worker (celery -A reviewhub worker); needs REDIS_URL.", [common], True)
    add(
        "beat",
        "Celery beat, the periodic sweeps (celery -A reviewhub beat); needs REDIS_URL.",
        [common],
        True,
    )
    manage_command = add(
        "manage",
        "Any management command, as manage.py runs it (`reviewhub manage help` lists them).",
        [common],
        False,
    )
    manage_command.add_argument("arguments", nargs=argparse.REMAINDER, help="The command and its options.")
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    arguments, options = parser.parse_known_args(argv)
    if options and not arguments.passes_options:
        parser.error(f"unrecognized arguments: {' '.join(options)}")
    arguments.data_dir = arguments.data_dir.resolve()
    keep_data_in(arguments.data_dir)
    if arguments.command == "demo":
        run_demo(arguments)
    elif arguments.command == "serve":
        serve(arguments.host, arguments.port, options)
    elif arguments.command == "migrate":
        manage(["migrate", *options])
    elif arguments.command == "createuser":
        run_createuser(arguments, options)
    elif arguments.command in ("worker", "beat"):
        run_celery(arguments.command, options)
    else:
        manage(arguments.arguments or ["help"])


if __name__ == "__main__":
    main()
