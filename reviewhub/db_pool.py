"""PostgreSQL pool health, for when the server drops every pooled connection at once (a restart, a failover,
pg_terminate_backend).

psycopg's pool checks each connection it hands out (Django's CONN_HEALTH_CHECKS), but after a failed check it
sleeps with backoff (1 s, 2 s, …) before trying the next idle one, so with several dead connections in the pool a
request waited out the pool timeout and answered 503 although the database was fine again (measured: 2.0 s, then
503). Here the first failed check sweeps the whole pool at once (`ConnectionPool.check`: dead connections are
discarded and replaced) and the pause before the retry is 0.1 s, so the retry gets a fresh connection.

A connection is checked with a round trip (psycopg's empty query) only when the server has said something to it
while it sat in the pool: a backend that is terminated (a restart, a failover, pg_terminate_backend) sends its
FATAL error and closes the socket, which the kernel reports as readable. A quiet socket is handed out as it is.
The round trip on every hand-out had been half of the database's transactions while 19,700 agents waited
(BENCHMARKS.md #10), and one more round trip for every request.

Django builds the pool with `check=ConnectionPool.check_connection` and accepts no other check, so this module
installs its check there; settings.py imports it only when the pool is on.
"""

import logging
import select
import threading
from typing import Any

from psycopg_pool import ConnectionPool
from psycopg_pool.base import AttemptWithBackoff

logger = logging.getLogger(__name__)

plain_check = ConnectionPool.check_connection
sweeping = threading.local()


def server_spoke(conn: Any) -> bool:
    """Whether the server sent anything to this idle connection (or it is already closed), without a round trip.
    poll(), not select(): a process holding thousands of sockets has descriptors past select's 1024."""
    if conn.closed:
        return True
    watch = select.poll()
    watch.register(conn.fileno(), select.POLLIN | select.POLLERR | select.POLLHUP)
    return bool(watch.poll(0))


def check_pooled_connection(conn: Any) -> None:
    try:
        if server_spoke(conn):
            plain_check(conn)  # a closed socket or a FATAL message makes this raise
    except Exception:
        pool = getattr(conn, "_pool", None)
        if isinstance(pool, ConnectionPool) and not getattr(sweeping, "active", False):
            logger.warning("a pooled database connection was dead; checking every idle one")
            sweeping.active = True
            try:
                pool.check()  # calls this function for each connection: the flag stops it recursing
            finally:
                sweeping.active = False
        raise


def install() -> None:
    ConnectionPool.check_connection = staticmethod(check_pooled_connection)  # type: ignore[method-assign]
    # The first pause after a failed check (and the first reconnection delay); psycopg's default is 1 s.
    AttemptWithBackoff.INITIAL_DELAY = 0.1
