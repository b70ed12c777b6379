"""Django's PostgreSQL backend, whose connection pool checks connections the way `reviewhub/db_pool.py` says.

Django 5.2 builds its psycopg pool with `check=ConnectionPool.check_connection` and takes no other: a "check" in
OPTIONS["pool"] is a second value for the same keyword (TypeError; Django ticket #37075 lets it through in a later
release). A custom backend is Django's way to change how a backend connects, so this one builds the pool as
Django 5.2 does (same connection arguments, Django's `_configure_connection`, one pool per alias, opened on first
use) but as a `SweepingConnectionPool`. Everything else is Django's backend. ENGINE "reviewhub.db.postgresql".
"""

from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db.backends.base.base import NO_DB_ALIAS
from django.db.backends.postgresql import base

from reviewhub.db_pool import SweepingConnectionPool


class DatabaseWrapper(base.DatabaseWrapper):
    @property
    def pool(self) -> Any:
        pool_options = self.settings_dict["OPTIONS"].get("pool")
        if self.alias == NO_DB_ALIAS or not pool_options or not self.settings_dict["CONN_HEALTH_CHECKS"]:
            return super().pool  # no pool, or psycopg's own without a check
        pools: dict[str, Any] = self._connection_pools  # type: ignore[attr-defined]
        if self.alias not in pools:
            if self.settings_dict.get("CONN_MAX_AGE", 0) != 0:
                raise ImproperlyConfigured("Pooling doesn't support persistent connections.")
            pool = SweepingConnectionPool(
                kwargs={**self.get_connection_params(), "autocommit": True},  # Django sets it later on
                open=False,
                configure=self._configure_connection,  # type: ignore[attr-defined]
                **({} if pool_options is True else pool_options),
            )
            # Threads racing here build a pool each; none is open yet, and the first one stored wins.
            pools.setdefault(self.alias, pool)
        return pools[self.alias]
