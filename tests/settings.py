"""The test run's settings: the project's own, with a cheap password hasher.

PBKDF2 at Django's million iterations costs ~0.3 s per reviewer made or signed in, a quarter of the suite's time;
the servers the tests start inherit DJANGO_SETTINGS_MODULE, so they check the same cheap hashes.
"""

import os
import uuid

from reviewhub.settings import *  # noqa: F403

PASSWORD_HASHERS = [
    "django.contrib.auth.hashers.MD5PasswordHasher",
    # OAuth client secrets keep their own hasher, named by OAUTH2_PROVIDER["CLIENT_SECRET_HASHER"].
    "elicitation.mcp.oauth_registration.ClientSecretHasher",
]

# Threads the tests start (in-process MCP calls, waiter threads, thread-per-client tests) keep their pooled
# connection until the process ends, so one test process needs a larger pool than a server does; PostgreSQL's 100
# connections still bound it with the live servers a test starts (each pool grows only on demand).
if "pool" in DATABASES["default"].get("OPTIONS", {}):  # noqa: F405
    DATABASES["default"]["OPTIONS"]["pool"]["max_size"] = 60  # noqa: F405

# Answers from the request page go out at once in tests, unless a test's server asks for the undo window
# (tests/browser/test_undo.py starts one with ANSWER_UNDO_SECONDS=5; page tests override the setting).
ANSWER_UNDO_SECONDS = int(os.environ.get("ANSWER_UNDO_SECONDS", "0"))

# The services leg's test processes share one Redis, but each has a database of its own, where agent and queue ids
# start at 1 again: a push to `agent.1` from one process's test would reach another's sockets. Each test process
# (and the servers it starts, which inherit the environment) gets a channel-layer and cache prefix of its own.
if REDIS_URL:  # noqa: F405
    if "PYTEST_XDIST_WORKER" in os.environ:  # an xdist test process, or a server one started
        REDIS_PREFIX = (
            f"rh-test-{os.environ['PYTEST_XDIST_TESTRUNUID'][:8]}-{os.environ['PYTEST_XDIST_WORKER']}"
        )
    else:
        REDIS_PREFIX = os.environ.setdefault("REVIEWHUB_TEST_REDIS_PREFIX", f"rh-test-{uuid.uuid4().hex[:8]}")
    CHANNEL_LAYERS["default"]["CONFIG"]["prefix"] = f"{REDIS_PREFIX}:"  # noqa: F405
    CACHES["default"]["KEY_PREFIX"] = REDIS_PREFIX  # noqa: F405
