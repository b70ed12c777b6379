"""PostgreSQL pool health, for when the server drops every pooled connection at once (a restart, a failover,
pg_terminate_backend).

Each connection the pool hands out is checked (Django's CONN_HEALTH_CHECKS). psycopg retries a failed check at once
with the next idle connection, but from the second failure on it sleeps with backoff (1 s, 2 s, …), so with several
dead connections in the pool a request waited out the pool timeout and answered 503 although the database was fine
again (measured: 2.0 s, then 503). Here the first failed check sweeps the whole pool (`ConnectionPool.check`, public:
dead connections are discarded and replaced), so psycopg's immediate retry waits only for a fresh connection.

A connection is checked with a round trip (psycopg's empty query) only when the server has said something to it
while it sat in the pool: a backend that is terminated (a restart, a failover, pg_terminate_backend) sends its
FATAL error and closes the socket, which the kernel reports as readable. A quiet socket is handed out as it is.
The round trip on every hand-out had been half of the database's transactions while 19,700 agents waited
(BENCHMARKS.md #10), and one more round trip for every request.

Django 5.2 gives its pool no other check than psycopg's, so the backend in `reviewhub/db/postgresql/` builds this
pool instead; settings.py selects that backend when the pool is on.
"""

import logging
import select
from typing import Any

from psycopg_pool import ConnectionPool

logger = logging.getLogger(__name__)

plain_check = ConnectionPool.check_connection


def server_spoke(conn: Any) -> bool:
    """Whether the server sent anything to this idle connection (or it is already closed), without a round trip.
    poll(), not select(): a process holding thousands of sockets has descriptors past select's 1024."""
    if conn.closed:
        return True
    watch = select.poll()
    watch.register(conn.fileno(), select.POLLIN | select.POLLERR | select.POLLHUP)
    return bool(watch.poll(0))


def check_pooled_connection(conn: Any) -> None:
    """Raise if the connection is dead; a round trip only if the server spoke to it while it was idle."""
    if server_spoke(conn):
        plain_check(conn)  # a closed socket or a FATAL message makes this raise


class SweepingConnectionPool(ConnectionPool[Any]):
    """psycopg's pool, checking what it hands out with `check_pooled_connection`; the first dead connection found
    makes it check all of its idle ones. The sweep (`check()`) uses psycopg's own round-trip check."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(check=self.check_and_sweep, **kwargs)

    def check_and_sweep(self, conn: Any) -> None:
        try:
            check_pooled_connection(conn)
        except Exception:
            logger.warning("a pooled database connection was dead; checking every idle one")
            self.check()
            raise
