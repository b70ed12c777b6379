"""Settings helpers fail loudly on bad values; the environment switches databases and layers."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from reviewhub import settings as project_settings

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("raw", "expected"), [("true", True), ("0", False), ("Yes", True), ("off", False), ("", True)]
)
def test_env_bool_reads_the_usual_spellings(
    monkeypatch: pytest.MonkeyPatch, raw: str, expected: bool
) -> None:
    monkeypatch.setenv("RH_FLAG", raw)
    assert project_settings.env_bool("RH_FLAG", True) is expected


def test_env_bool_rejects_anything_else(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RH_FLAG", "maybe")
    with pytest.raises(ImproperlyConfigured, match="RH_FLAG='maybe' is not a boolean"):
        project_settings.env_bool("RH_FLAG", False)


@pytest.mark.parametrize(("raw", "message"), [("ten", "not a whole number"), ("-3", "must be at least 0")])
def test_env_int_rejects_bad_values(monkeypatch: pytest.MonkeyPatch, raw: str, message: str) -> None:
    monkeypatch.setenv("RH_NUMBER", raw)
    with pytest.raises(ImproperlyConfigured, match=message):
        project_settings.env_int("RH_NUMBER", 1)


def settings_in_subprocess(env: dict[str, str], expression: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    code = f"import reviewhub.settings as s; print(({expression},))"
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**clean, **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_embedded_default_is_sqlite_in_memory_layer_and_eager_tasks() -> None:
    result = settings_in_subprocess(
        {},
        "s.DATABASES['default']['ENGINE'], s.CHANNEL_LAYERS['default']['BACKEND'], s.CELERY_TASK_ALWAYS_EAGER",
    )
    assert result.stdout.strip() == (
        "('django.db.backends.sqlite3', 'channels.layers.InMemoryChannelLayer', True)"
    ), result.stderr


def test_urls_switch_to_postgres_and_redis() -> None:
    result = settings_in_subprocess(
        {"DATABASE_URL": "postgres://u@db:5432/rh", "REDIS_URL": "redis://cache:6379/0"},
        "s.DATABASES['default']['ENGINE'], s.DATABASES['default']['NAME'], s.CELERY_BROKER_URL, s.CELERY_TASK_ALWAYS_EAGER",
    )
    # With the pool on (the default), Django's backend building ReviewHub's pool (reviewhub/db/postgresql).
    assert result.stdout.strip() == ("('reviewhub.db.postgresql', 'rh', 'redis://cache:6379/0', False)"), (
        result.stderr
    )


def test_without_the_pool_the_engine_is_djangos_own() -> None:
    for env in ({"DB_POOL_MAX_SIZE": "0"}, {"DB_CONN_MAX_AGE": "60"}):
        result = settings_in_subprocess(
            {"DATABASE_URL": "postgres://u@db:5432/rh", **env},
            "s.DATABASES['default']['ENGINE'], 'pool' in s.DATABASES['default'].get('OPTIONS', {})",
        )
        assert result.stdout.strip() == "('django.db.backends.postgresql', False)", (env, result.stderr)


def test_behind_a_transaction_pooler_the_pool_is_off_and_cursors_are_client_side() -> None:
    result = settings_in_subprocess(
        {"DATABASE_URL": "postgres://u@pgbouncer:6432/rh", "DB_TRANSACTION_POOLER": "true"},
        "s.DATABASES['default']['ENGINE'], s.DATABASES['default']['DISABLE_SERVER_SIDE_CURSORS'], "
        "sorted(s.DATABASES['default'].get('OPTIONS', {}))",
    )
    # No pool, and none of server-side binding and prepared statements: Django's defaults, as PgBouncer needs.
    assert result.stdout.strip() == "('django.db.backends.postgresql', True, [])", result.stderr


def test_postgres_binds_parameters_on_the_server_and_prepares_repeated_statements() -> None:
    result = settings_in_subprocess(
        {"DATABASE_URL": "postgres://u@db:5432/rh"},
        "s.DATABASES['default']['OPTIONS']['server_side_binding'], "
        "s.DATABASES['default']['OPTIONS']['prepare_threshold']",
    )
    assert result.stdout.strip() == "(True, 5)", result.stderr


def test_a_non_postgres_database_url_is_refused_with_a_clear_message() -> None:
    result = settings_in_subprocess({"DATABASE_URL": "mysql://u@db/rh"}, "1")
    assert result.returncode != 0
    assert "DATABASE_URL must be a postgres:// URL" in result.stderr


def test_a_bad_number_in_the_environment_stops_startup() -> None:
    result = settings_in_subprocess({"MAX_BODY_BYTES": "lots"}, "1")
    assert result.returncode != 0
    assert "MAX_BODY_BYTES='lots' is not a whole number" in result.stderr


def test_the_asgi_handler_runs_the_whole_middleware_chain_in_one_sync_pass() -> None:
    """Long-polls wait in front of Django (delivery/long_poll.py) and the ASGI handler runs the chain in one thread
    hop, so a sync-only middleware (WhiteNoise) adds no hop; in async mode each sync one would add two."""
    from asyncio import iscoroutinefunction

    from django.conf import settings
    from django.utils.module_loading import import_string

    from reviewhub.asgi import OneHopASGIHandler

    sync_only = [
        path for path in settings.MIDDLEWARE if not getattr(import_string(path), "async_capable", False)
    ]
    assert sync_only == ["whitenoise.middleware.WhiteNoiseMiddleware"]
    assert not iscoroutinefunction(OneHopASGIHandler()._middleware_chain)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("", (700, 10, 10)), ("700,10,1000", (700, 10, 1000)), (" 1000, 5 ,50", (1000, 5, 50))],
)
def test_gc_thresholds_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, raw: str, expected: tuple[int, ...]
) -> None:
    monkeypatch.setenv("RH_GC", raw)
    assert project_settings.env_ints("RH_GC", [700, 10, 10], count=3, minimum=1) == expected


@pytest.mark.parametrize("raw", ["700,10", "700,ten,10", "0,10,10", "1,2,3,4"])
def test_bad_gc_thresholds_stop_startup(raw: str) -> None:
    result = settings_in_subprocess({"GC_THRESHOLDS": raw}, "1")
    assert result.returncode != 0
    assert f"GC_THRESHOLDS={raw!r} must be 3 comma-separated whole numbers of at least 1" in result.stderr


def test_a_server_process_freezes_what_it_loaded_and_collects_young_objects_less_often() -> None:
    """Importing the ASGI application (what uvicorn does) tunes the collector: gc_tuning.py says why."""
    code = (
        "import gc; from reviewhub.settings import GC_THRESHOLDS; before = gc.get_freeze_count(); "
        "import reviewhub.asgi; print(before, gc.get_freeze_count(), gc.get_threshold() == GC_THRESHOLDS)"
    )
    clean = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "GC_THRESHOLDS"}}
    result = subprocess.run(
        [sys.executable, "-c", code], env=clean, cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    before, frozen, tuned = result.stdout.split()
    assert (int(before), tuned) == (0, "True")
    assert int(frozen) > 100_000  # Django, the app and its libraries: never walked again
