"""The test provider as a running server: migrated, served by uvicorn on a free loopback port, stopped after."""

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.delivery.liveserver import READY_BOUND_SECONDS, REPO, free_port


class OIDCProvider:
    def __init__(self, directory: Path) -> None:
        self.port = free_port()
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.oidc_provider.settings",
            "OIDC_PROVIDER_DB": str(directory / "oidc-provider.sqlite3"),
            "OIDC_PROVIDER_RSA_KEY": pem.decode(),
            "PYTHONUNBUFFERED": "1",
        }
        self.env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        self.process: subprocess.Popen[bytes] | None = None
        handle, name = tempfile.mkstemp(prefix="oidc-provider-", suffix=".log")
        os.close(handle)
        self.log = Path(name)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def issuer(self) -> str:
        return f"{self.url}/o"

    def run(self, *args: str) -> None:
        result = subprocess.run(
            [sys.executable, *args], cwd=REPO, env=self.env, capture_output=True, text=True, timeout=300
        )
        assert result.returncode == 0, result.stdout + result.stderr

    def set_client(self, client_id: str, secret: str, redirect_uri: str) -> None:
        self.run("-m", "tests.oidc_provider.accounts", "client", client_id, secret, redirect_uri)

    def set_user(self, username: str, password: str, email: str, groups: list[str]) -> None:
        self.run("-m", "tests.oidc_provider.accounts", "user", username, password, email, *groups)

    def start(self) -> "OIDCProvider":
        self.run("-m", "django", "migrate", "--noinput", "-v", "0")
        listen = ["--host", "127.0.0.1", "--port", str(self.port)]
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "uvicorn", "tests.oidc_provider.asgi:application", *listen],
                cwd=REPO,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        give_up = time.monotonic() + READY_BOUND_SECONDS  # a safety net, not a deadline (see liveserver.py)
        while time.monotonic() < give_up:
            if self.process.poll() is not None:
                raise RuntimeError(f"the provider exited at start:\n{self.logs()}")
            try:
                if httpx.get(f"{self.issuer}/.well-known/openid-configuration", timeout=5).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"the provider did not answer:\n{self.logs()}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    def logs(self) -> str:
        return self.log.read_text(errors="replace")[-6000:]
