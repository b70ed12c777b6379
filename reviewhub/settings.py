"""ReviewHub settings, driven by environment variables.

With nothing set, ReviewHub runs embedded: SQLite (WAL), an in-memory channel layer and eager Celery tasks.
`DATABASE_URL` switches to PostgreSQL, `REDIS_URL` to channels_redis and a Celery broker.
"""

from pathlib import Path

import dj_database_url
import django_stubs_ext
from csp.constants import NONE, SELF
from django.conf import global_settings
from django.core.exceptions import ImproperlyConfigured

from reviewhub.env import (
    env_bool,
    env_flow_keys,
    env_group_queues,
    env_int,
    env_ints,
    env_issuer,
    env_list,
    env_origins,
    env_rate,
    env_str,
)

# Lets the code write `admin.ModelAdmin[Agent]` and `forms.ModelForm[Queue]` as the type checker reads them.
django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent


DEBUG = env_bool("DEBUG", False)
SECRET_KEY = env_str("SECRET_KEY")
if not SECRET_KEY:
    if not DEBUG and env_bool("REVIEWHUB_PRODUCTION", False):
        raise ImproperlyConfigured("SECRET_KEY must be set in production.")
    # Embedded/dev default: stable per checkout so sessions survive restarts, never used in production.
    SECRET_KEY = "dev-only-insecure-" + str(BASE_DIR)

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
# The public origin that hosted-flow URLs and links in notifications are built on.
PUBLIC_URL = env_str("PUBLIC_URL", "http://127.0.0.1:8000").rstrip("/")

INSTALLED_APPS = [
    "daphne",  # `manage.py runserver` serves ASGI (sockets too) with it; deployments serve with uvicorn
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "oauth2_provider",
    "elicitation",
    "elicitation.reviewer.company_sign_in",  # inert until OIDC_ISSUER is set; its table is always there
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Above WhiteNoise (inserted below when SERVE_STATIC), so static files carry the same headers as pages.
    "csp.middleware.CSPMiddleware",
    "elicitation.reviewer.middleware.PermissionsPolicyMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "elicitation.reviewer.middleware.BodySizeLimitMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # Signs out a session idle longer than SESSION_IDLE_TIMEOUT_SECONDS.
    "elicitation.reviewer.session_idle.session_idle_timeout",
    "django.contrib.messages.middleware.MessageMiddleware",
    # 429 for a sign-in attempt on a username locked after repeated failures (elicitation.reviewer.login_throttle).
    "elicitation.reviewer.login_throttle.LoginThrottleMiddleware",
]

# --- Browsers on another origin (django-cors-headers; README "Browsers on another origin") ----------------------
# Off unless origins are listed. Only what an agent key opens: reviewer pages, the reviewer API (which takes session
# cookies), admin and OAuth consent stay same-origin. No cookies cross: agents send their key in Authorization.
CORS_ALLOWED_ORIGINS = env_origins("CORS_ALLOWED_ORIGINS")
CORS_URLS_REGEX = r"^/api/v1/(requests|events|ws-ticket|flows)(/|$)"
CORS_ALLOW_CREDENTIALS = False
CORS_ALLOW_METHODS = ["GET", "POST"]
CORS_ALLOW_HEADERS = ["accept", "authorization", "content-type", "idempotency-key"]
# The clients wait as long as Retry-After says on a 429 or 503; a page cannot read it unless it is exposed.
CORS_EXPOSE_HEADERS = ["retry-after"]
if CORS_ALLOWED_ORIGINS:
    INSTALLED_APPS.append("corsheaders")  # its system checks
    # First, so that answers made further down the chain (413, 429, 503) carry the headers a page needs to read them.
    MIDDLEWARE.insert(0, "corsheaders.middleware.CorsMiddleware")

ROOT_URLCONF = "reviewhub.urls"
ASGI_APPLICATION = "reviewhub.asgi.application"
WSGI_APPLICATION = None

# templates/ and static/ sit at the top of a checkout; an installed wheel carries both inside the reviewhub package
# (package data cannot live outside a package; pyproject.toml maps them there), so look beside this file first.
PACKAGE_DIR = Path(__file__).resolve().parent
TEMPLATES_AND_STATIC_DIR = PACKAGE_DIR if (PACKAGE_DIR / "templates").is_dir() else BASE_DIR

TEMPLATES = [
    {
        # Django's engine; a stored lone surrogate renders as U+FFFD instead of failing the page.
        "BACKEND": "elicitation.reviewer.template_backend.SurrogateSafeTemplates",
        "DIRS": [TEMPLATES_AND_STATIC_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "elicitation.reviewer.context_processors.navigation",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------------------------------------------
DATABASE_URL = env_str("DATABASE_URL")
if DATABASE_URL:
    try:
        DATABASES = {
            "default": dj_database_url.parse(DATABASE_URL, conn_max_age=env_int("DB_CONN_MAX_AGE", 0))
        }
    except ValueError as exc:
        raise ImproperlyConfigured(f"DATABASE_URL is not a database URL: {exc}") from None
    if DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
        raise ImproperlyConfigured(
            "DATABASE_URL must be a postgres:// URL (PostgreSQL is the services database)."
        )
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
    # Several test runs on one server (a developer's and CI's, or parallel work) each need a test database.
    if env_str("PG_TEST_NAME"):
        DATABASES["default"]["TEST"] = {"NAME": env_str("PG_TEST_NAME")}
    # Under ASGI each request runs in a thread of its own, so CONN_MAX_AGE cannot keep a connection between
    # requests: without a pool every request starts a new PostgreSQL backend, and a burst can exhaust
    # max_connections (BENCHMARKS.md). The pool also bounds connections per process. 0 turns it off.
    # Behind PgBouncer in transaction pooling (docs/operations.md, "PostgreSQL connections") PgBouncer pools, and
    # a server-side cursor cannot outlive its transaction there.
    DB_TRANSACTION_POOLER = env_bool("DB_TRANSACTION_POOLER", False)
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = DB_TRANSACTION_POOLER
    if not DB_TRANSACTION_POOLER:
        # Parameters bound by the server, and a statement run five times on a connection prepared there: PostgreSQL
        # then plans it once per connection instead of on every run (Django's default, for the poolers' sake, sends
        # each statement with its values inlined). A key check went 384 -> 225 µs (BENCHMARKS.md, #13).
        DATABASES["default"].setdefault("OPTIONS", {}).update(server_side_binding=True, prepare_threshold=5)
    DB_POOL_MAX_SIZE = env_int("DB_POOL_MAX_SIZE", 0 if DB_TRANSACTION_POOLER else 20)
    if DB_POOL_MAX_SIZE and not DATABASES["default"].get("CONN_MAX_AGE"):
        # Each connection handed out is checked (a round trip only if the server spoke to it while idle); one
        # found dead makes the pool check all of its idle ones at once (reviewhub/db_pool.py), so after the
        # server drops them all the next request already succeeds. The engine is Django's backend building that
        # pool (reviewhub/db/postgresql/base.py).
        DATABASES["default"]["ENGINE"] = "reviewhub.db.postgresql"
        DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
            "min_size": min(2, DB_POOL_MAX_SIZE),
            "max_size": DB_POOL_MAX_SIZE,
            "timeout": env_int("DB_POOL_TIMEOUT_SECONDS", 10, minimum=1),
        }
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": env_str("SQLITE_PATH", str(BASE_DIR / "reviewhub.sqlite3")),
            # IMMEDIATE transactions take the write lock up front, so two writers queue instead of deadlocking.
            "OPTIONS": {
                "transaction_mode": "IMMEDIATE",
                "timeout": 20,
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
            "TEST": {"NAME": env_str("SQLITE_TEST_PATH", str(BASE_DIR / "reviewhub-test.sqlite3"))},
        }
    }
USES_POSTGRES = bool(DATABASE_URL)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Channels and Celery --------------------------------------------------------------------------------------
REDIS_URL = env_str("REDIS_URL")
# Every Redis call (channel layer, cache and rate limits, Celery broker) gives up after these many seconds, so a
# hung Redis (alive but not answering) costs a request at most this long; pushes are best effort either way.
REDIS_CONNECT_TIMEOUT_SECONDS = env_int("REDIS_CONNECT_TIMEOUT_SECONDS", 2, minimum=1)
REDIS_OPERATION_TIMEOUT_SECONDS = env_int("REDIS_OPERATION_TIMEOUT_SECONDS", 2, minimum=1)
# While sockets are open each process checks the channel layer this often; when it answers again after failing,
# every open socket rechecks what it waits on at once (elicitation/delivery/socket_base.py).
CHANNEL_LAYER_PROBE_SECONDS = env_int("CHANNEL_LAYER_PROBE_SECONDS", 1, minimum=1)
REDIS_TIMEOUTS = {
    "socket_connect_timeout": REDIS_CONNECT_TIMEOUT_SECONDS,
    "socket_timeout": REDIS_OPERATION_TIMEOUT_SECONDS,
}
if REDIS_URL:
    # Pub/sub: no per-channel capacity and no group expiry, which the waiter hub's one channel per process needs, and
    # it never dropped a push in the bench (docs/operations.md, "The channel layer"; BENCHMARKS.md #6).
    CHANNEL_LAYER_BACKEND = env_str("CHANNEL_LAYER_BACKEND", "channels_redis.pubsub.RedisPubSubChannelLayer")
    layer_host: dict[str, object] = {"address": REDIS_URL, **REDIS_TIMEOUTS}
    if CHANNEL_LAYER_BACKEND == "channels_redis.core.RedisChannelLayer":
        # Its receive blocks in BZPOPMIN for 5 s: a shorter read timeout would cut every idle wait.
        layer_host["socket_timeout"] = max(REDIS_OPERATION_TIMEOUT_SECONDS, 10)
    CHANNEL_LAYERS = {"default": {"BACKEND": CHANNEL_LAYER_BACKEND, "CONFIG": {"hosts": [layer_host]}}}
    CELERY_BROKER_URL = REDIS_URL
    CELERY_BROKER_CONNECTION_TIMEOUT = REDIS_CONNECT_TIMEOUT_SECONDS
    CELERY_BROKER_TRANSPORT_OPTIONS = {**REDIS_TIMEOUTS}
    # One attempt to enqueue: a webhook that could not be queued is still PENDING and retry_due_webhooks sends it.
    CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 0}
    CELERY_TASK_ALWAYS_EAGER = False
    # Shared by every process: single-use WebSocket tickets and notification batching rely on cache.add.
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            # One pool per process, not one per request thread (reviewhub/redis_pool.py).
            "OPTIONS": {"pool_class": "reviewhub.redis_pool.SharedConnectionPool", **REDIS_TIMEOUTS},
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    CELERY_BROKER_URL = "memory://"
    CELERY_TASK_ALWAYS_EAGER = True
CELERY_TASK_EAGER_PROPAGATES = False
# Notices (Slack posts, e-mails) go to a queue of their own, consumed by a worker of their own (docker-compose.yml's
# `notices`), so answers and sweeps on the default queue never wait behind a slow peer. The sweep that finds due
# notices stays on the default queue; what it finds is sent on `notices`.
CELERY_TASK_ROUTES = {
    f"elicitation.delivery.reach_tasks.{name}": {"queue": "notices"}
    for name in (
        "notify_arrivals",
        "notify_tier",
        "send_notices",
        "send_notice",
        "update_slack_messages",
        "send_reach_digests",
    )
}
# Both declared: a worker started without -Q consumes both, so notices are sent wherever one worker runs.
CELERY_TASK_QUEUES: dict[str, dict[str, str]] = {"celery": {}, "notices": {}}
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BEAT_SCHEDULE = {
    "expire-overdue-requests": {"task": "elicitation.ops.tasks.expire_overdue_requests", "schedule": 5.0},
    "release-expired-claims": {"task": "elicitation.ops.tasks.release_expired_claims", "schedule": 5.0},
    "purge-expired-flows": {"task": "elicitation.flows.tasks.purge_expired_flows", "schedule": 60.0},
    "send-notification-digests": {
        "task": "elicitation.ops.tasks.send_notification_digests",
        "schedule": 15.0,
    },
    "retry-due-webhooks": {"task": "elicitation.delivery.tasks.retry_due_webhooks", "schedule": 15.0},
    # Held answers whose undo window closed while their timer's process was gone (normally the timer sends them).
    "send-held-answers": {"task": "elicitation.delivery.held_answers.send_due_answers", "schedule": 5.0},
    # Reach: the escalation chain (T1, T2), notice retries and per-reviewer e-mail digests.
    "run-escalation-chain": {
        "task": "elicitation.delivery.reach_tasks.run_escalation_chain",
        "schedule": 5.0,
    },
    "retry-due-notices": {"task": "elicitation.delivery.reach_tasks.retry_due_notices", "schedule": 15.0},
    "send-reach-digests": {"task": "elicitation.delivery.reach_tasks.send_reach_digests", "schedule": 60.0},
}
# The embedded default runs those same tasks in-process (elicitation/sweeper.py, started by the ASGI app);
# never under a test runner unless a test starts it, and off by default with REDIS_URL, where Celery beat runs them.
PERIODIC_SWEEPS_IN_PROCESS = env_bool("PERIODIC_SWEEPS_IN_PROCESS", not REDIS_URL)
SWEEP_INTERVAL_SECONDS = env_int("SWEEP_INTERVAL_SECONDS", 5, minimum=1)
# A reviewer's answer from the request page waits this long, with an Undo, before the agent is told (each
# reviewer may turn it off in their preferences); 0 turns undo off for everyone (docs/reviewers.md).
ANSWER_UNDO_SECONDS = env_int("ANSWER_UNDO_SECONDS", 5)
# Urgent-request emails are batched: the first one in a queue opens a window, one digest lists them all.
NOTIFICATION_BATCH_SECONDS = env_int("NOTIFICATION_BATCH_SECONDS", 60, minimum=1)
# Reach (README "Getting reviewers' attention"): Slack app credentials, where its Web API is (tests point it at
# loopback), notice retries, digest window, and how often a page polls its waiting count.
SLACK_BOT_TOKEN = env_str("SLACK_BOT_TOKEN")
SLACK_SIGNING_SECRET = env_str("SLACK_SIGNING_SECRET")
SLACK_API_URL = env_str("SLACK_API_URL", "https://slack.com/api/")
SLACK_TIMEOUT_SECONDS = env_int("SLACK_TIMEOUT_SECONDS", 10, minimum=1)
NOTICE_MAX_ATTEMPTS = env_int("NOTICE_MAX_ATTEMPTS", 6, minimum=1)
NOTICE_BACKOFF_BASE_SECONDS = env_int("NOTICE_BACKOFF_BASE_SECONDS", 5, minimum=1)
# Notices of one channel sent by one task (the e-mails over one SMTP connection); more make more tasks, sent at once.
NOTICE_BATCH_SIZE = env_int("NOTICE_BATCH_SIZE", 10, minimum=1)
NOTICE_BACKOFF_CAP_SECONDS = env_int("NOTICE_BACKOFF_CAP_SECONDS", 900, minimum=1)
REACH_DIGEST_SECONDS = env_int("REACH_DIGEST_SECONDS", 15 * 60, minimum=1)
BROWSER_POLL_SECONDS = env_int("BROWSER_POLL_SECONDS", 5, minimum=1)
# Web Push (docs/reach.md "Web Push"): the VAPID key pair `manage.py generate_vapid_keys` prints (base64url), and
# the contact push services may write to about this server (mailto: or https:). Unset, push is off.
WEB_PUSH_VAPID_PRIVATE_KEY = env_str("WEB_PUSH_VAPID_PRIVATE_KEY")
WEB_PUSH_VAPID_PUBLIC_KEY = env_str("WEB_PUSH_VAPID_PUBLIC_KEY")
WEB_PUSH_CONTACT = env_str("WEB_PUSH_CONTACT")
WEB_PUSH_TIMEOUT_SECONDS = env_int("WEB_PUSH_TIMEOUT_SECONDS", 10, minimum=1)
# A browser's push endpoint is the server's to POST to: in production only to public https hosts.
WEB_PUSH_ALLOW_PRIVATE_ENDPOINTS = env_bool(
    "WEB_PUSH_ALLOW_PRIVATE_ENDPOINTS", not env_bool("REVIEWHUB_PRODUCTION", False)
)
# Bearer token for Prometheus scraping /metrics; unset, only staff sessions may read it.
METRICS_TOKEN = env_str("METRICS_TOKEN")

# --- Auth, sessions, security ----------------------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# A session ends after this long without a request (elicitation/reviewer/session_idle.py), and after
# SESSION_MAX_AGE_SECONDS whatever happens.
SESSION_IDLE_TIMEOUT_SECONDS = env_int("SESSION_IDLE_TIMEOUT_SECONDS", 8 * 3600, minimum=60)
SESSION_COOKIE_AGE = env_int("SESSION_MAX_AGE_SECONDS", 14 * 24 * 3600, minimum=60)
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard"
LOGOUT_REDIRECT_URL = "login"
# The throttle backend goes first: while a username+address is locked it refuses before any password check.
AUTHENTICATION_BACKENDS = [
    "elicitation.reviewer.login_throttle.LoginThrottleBackend",
    "django.contrib.auth.backends.ModelBackend",
]
LOGIN_FAILURE_LIMIT = env_int("LOGIN_FAILURE_LIMIT", 5, minimum=1)
LOGIN_FAILURE_WINDOW_SECONDS = env_int("LOGIN_FAILURE_WINDOW_SECONDS", 15 * 60, minimum=1)

# --- Company sign-in (OpenID Connect; elicitation/reviewer/company_sign_in/, README "Company sign-in") ----------
# Off unless OIDC_ISSUER is set. Endpoints and signing keys come from the issuer's discovery document; the OIDC_RP_*
# and OIDC_USE_* names are mozilla-django-oidc's.
OIDC_ISSUER = env_issuer("OIDC_ISSUER")
OIDC_PROVIDER_NAME = env_str("OIDC_PROVIDER_NAME", "your company account")  # "Sign in with …"
OIDC_RP_CLIENT_ID = env_str("OIDC_CLIENT_ID")
OIDC_RP_CLIENT_SECRET = env_str("OIDC_CLIENT_SECRET")
OIDC_RP_SCOPES = " ".join(env_str("OIDC_SCOPES", "openid email profile").replace(",", " ").split())
OIDC_RP_SIGN_ALGO = "RS256"  # the only algorithm an ID token's signature is accepted in
OIDC_USE_NONCE = True
OIDC_USE_PKCE = True
OIDC_TIMEOUT = env_int("OIDC_TIMEOUT_SECONDS", 10, minimum=1)
# The groups claim → queues (company_sign_in/queue_grants.py): `<prefix><slug>` → member, `<prefix><slug>:supervisor`
# → supervisor, and OIDC_GROUP_QUEUES for other group names. Set at every sign-in: the provider owns that access.
OIDC_GROUPS_CLAIM = env_str("OIDC_GROUPS_CLAIM", "groups")
OIDC_GROUP_PREFIX = env_str("OIDC_GROUP_PREFIX", "reviewhub:")
OIDC_GROUP_QUEUES = env_group_queues("OIDC_GROUP_QUEUES")
# Off, the sign-in page offers the provider alone and refuses password POSTs; staff keep their passwords on the
# admin's sign-in page, the way in when the provider is down.
LOCAL_PASSWORD_LOGIN = env_bool("LOCAL_PASSWORD_LOGIN", True)
if OIDC_ISSUER:
    if not OIDC_RP_CLIENT_ID or not OIDC_RP_CLIENT_SECRET:
        raise ImproperlyConfigured("OIDC_ISSUER is set: set OIDC_CLIENT_ID and OIDC_CLIENT_SECRET as well.")
    if "openid" not in OIDC_RP_SCOPES.split():
        raise ImproperlyConfigured(f"OIDC_SCOPES={OIDC_RP_SCOPES!r} must include openid.")
    AUTHENTICATION_BACKENDS.append("elicitation.reviewer.company_sign_in.backend.CompanySignInBackend")
if not LOCAL_PASSWORD_LOGIN:
    if not OIDC_ISSUER:
        raise ImproperlyConfigured(
            "LOCAL_PASSWORD_LOGIN=false needs OIDC_ISSUER: otherwise only staff could sign in."
        )
    AUTHENTICATION_BACKENDS[AUTHENTICATION_BACKENDS.index("django.contrib.auth.backends.ModelBackend")] = (
        "elicitation.reviewer.company_sign_in.backend.StaffPasswordBackend"
    )

# --- OAuth 2.1 for /mcp/ (django-oauth-toolkit; elicitation/mcp/oauth.py) --------------------------------------
# ReviewHub is both the authorization server and the protected resource; every URL is built on PUBLIC_URL so
# the metadata, the 401 challenge and the token audience agree. Code + PKCE S256 only; tokens are bound to
# PUBLIC_URL/mcp (RFC 8707). Clients register by metadata document (CIMD, fetched SSRF-safely) or RFC 7591.
MCP_RESOURCE_URL = PUBLIC_URL + "/mcp"
# While ask_reviewer waits for a human, a progress notification every this many seconds keeps the host waiting.
MCP_PROGRESS_INTERVAL_SECONDS = env_int("MCP_PROGRESS_INTERVAL_SECONDS", 15, minimum=1)
# Upstream MCP servers fronted at /mcp/gateway/<name>/ (docs/mcp.md, "Gateway"): JSON, name -> {command|url, queue,
# ...}; checked when the server starts (elicitation/mcp/gateway/config.py). Holds credentials: never logged.
MCP_GATEWAY_UPSTREAMS = env_str("MCP_GATEWAY_UPSTREAMS", "")
# RFC 7591 registrations per client address (an IPv6 one by its /64), "off" for none; past it 429 and nothing is
# stored (elicitation/mcp/oauth_registration.py). Counted in the cache like AGENT_RATE.
OAUTH_REGISTRATION_RATE = env_rate("OAUTH_REGISTRATION_RATE", "10/hour")
# Client secrets are 128 random characters the server picks; Django's default hasher (PBKDF2, 1M rounds) made each
# registration and each token request naming a client cost ~0.32 s of CPU. Their own hasher takes ~0.3 ms; listed
# last, it is never used for a person's password (elicitation/mcp/oauth_registration.py).
PASSWORD_HASHERS = [
    *global_settings.PASSWORD_HASHERS,
    "elicitation.mcp.oauth_registration.ClientSecretHasher",
]
OAUTH2_PROVIDER = {
    "OAUTH2_VALIDATOR_CLASS": "elicitation.mcp.oauth.ReviewHubOAuth2Validator",
    "CLIENT_SECRET_HASHER": "client_secret_pbkdf2_sha256",  # ClientSecretHasher.algorithm
    "SCOPES": {"mcp": "Use ReviewHub's MCP tools as the agent and queues you choose"},
    "DEFAULT_SCOPES": ["mcp"],
    "PKCE_REQUIRED": True,
    "ACCESS_TOKEN_EXPIRE_SECONDS": env_int("MCP_ACCESS_TOKEN_SECONDS", 3600, minimum=60),
    "REFRESH_TOKEN_EXPIRE_SECONDS": env_int("MCP_REFRESH_TOKEN_SECONDS", 30 * 24 * 3600, minimum=60),
    "AUTHORIZATION_CODE_EXPIRE_SECONDS": 60,
    "ROTATE_REFRESH_TOKEN": True,
    "REFRESH_TOKEN_REUSE_PROTECTION": True,
    "ALLOWED_REDIRECT_URI_SCHEMES": ["http", "https"],
    "ALLOW_LOCALHOST_LOOPBACK": True,  # native hosts listen on a loopback port of their choosing (RFC 8252)
    "OIDC_ISS_ENDPOINT": PUBLIC_URL,
    "COMPLIANT_BCP_RFC9700_IMPLICIT_GRANT": True,
    "COMPLIANT_BCP_RFC9700_PASSWORD_GRANT": True,
    "COMPLIANT_BCP_RFC9700_PKCE_METHOD": True,  # S256 only
    "COMPLIANT_BCP_RFC9700_ACCESS_TOKEN_TRANSPORT": True,
    "COMPLIANT_BCP_RFC9700_AUTHZ_RESPONSE_ISS": True,
    "COMPLIANT_BCP_RFC9700_TOKEN_STORAGE": True,  # tokens stored as checksums only
    "OAUTH2_RESPONSE_TYPES_SUPPORTED": ["code"],
    "OAUTH2_GRANT_TYPES_SUPPORTED": ["authorization_code", "refresh_token"],
    "OAUTH2_TOKEN_ENDPOINT_AUTH_METHODS_SUPPORTED": ["none", "client_secret_post", "client_secret_basic"],
    "DCR_ENABLED": env_bool("MCP_DYNAMIC_CLIENT_REGISTRATION", True),
    "DCR_REGISTRATION_PERMISSION_CLASSES": ("oauth2_provider.dcr.AllowAllDCRPermission",),
    "CIMD_ENABLED": env_bool("MCP_CLIENT_METADATA_DOCUMENTS", True),
    "CIMD_FETCH_TIMEOUT_SECONDS": 5,
    "CIMD_MAX_DOCUMENT_SIZE": 16 * 1024,
    "OAUTH2_PROTECTED_RESOURCE_IDENTIFIER": MCP_RESOURCE_URL,
    "OAUTH2_PROTECTED_RESOURCE_AUTHORIZATION_SERVERS": [PUBLIC_URL],
    "OAUTH2_PROTECTED_RESOURCE_NAME": "ReviewHub MCP server",
}
# W008 warns that `http` redirect URIs are allowed: desktop MCP hosts receive the code on an http loopback port
# (RFC 8252), which DOT's note says to keep; PKCE makes an intercepted code useless.
SILENCED_SYSTEM_CHECKS = ["oauth2_provider.W008"]

SECURE = env_bool("SECURE", False)  # behind HTTPS: secure cookies, HSTS, redirect
SESSION_COOKIE_SECURE = SECURE
CSRF_COOKIE_SECURE = SECURE
SECURE_SSL_REDIRECT = SECURE
SECURE_HSTS_SECONDS = 31_536_000 if SECURE else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = SECURE
SECURE_HSTS_PRELOAD = SECURE
SECURE_PROXY_SSL_HEADER = (
    ("HTTP_X_FORWARDED_PROTO", "https") if env_bool("TRUST_X_FORWARDED_PROTO", False) else None
)
SESSION_COOKIE_HTTPONLY = True
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# Agent text is rendered on reviewer pages, so no inline script may ever run: scripts come from our origin only.
# django-csp writes it; the hosted flow page narrows it further (elicitation/reviewer/flow_pages.py).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF, "data:"],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [NONE],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    }
}
# API callers get a JSON error body for CSRF refusals too (pages keep Django's page).
CSRF_FAILURE_VIEW = "elicitation.api.errors.csrf_failure"

# HMAC pepper for agent and reviewer API keys: a database leak alone cannot verify guessed keys.
API_KEY_PEPPER = env_str("API_KEY_PEPPER", SECRET_KEY)
# Rotation window (manage.py rotate_api_key_pepper): keys hashed under these still sign in, and are re-hashed
# under API_KEY_PEPPER when they do.
API_KEY_PEPPER_PREVIOUS = env_list("API_KEY_PEPPER_PREVIOUS", [])

# Hosted secret flows: AES-GCM keys by id (first = current), and how long an unretrieved secret is kept.
FLOW_ENCRYPTION_KEYS = env_flow_keys("FLOW_ENCRYPTION_KEYS", SECRET_KEY)
FLOW_RETENTION_SECONDS = env_int("FLOW_RETENTION_SECONDS", 24 * 3600, minimum=60)
# Signed receipts of completed requests (elicitation/queue/receipts.py, docs/approvals.md): a JWK Set or PEM keys
# each after a `kid:` line; the first signs, all are published. Unset, one key is derived from SECRET_KEY.
RECEIPT_SIGNING_KEYS = env_str("RECEIPT_SIGNING_KEYS")
# Production refuses secrets that silently derive from SECRET_KEY: rotating SECRET_KEY (after a leak, say) must
# not lock every agent out or make stored flow secrets unreadable, and one leaked value must not give away all.
if env_bool("REVIEWHUB_PRODUCTION", False) and not DEBUG:
    if not env_str("API_KEY_PEPPER") or API_KEY_PEPPER == SECRET_KEY:
        raise ImproperlyConfigured("API_KEY_PEPPER must be set in production, and differ from SECRET_KEY.")
    if not env_str("FLOW_ENCRYPTION_KEYS").strip():
        raise ImproperlyConfigured(
            "FLOW_ENCRYPTION_KEYS must be set in production (manage.py rotate_flow_key prints a key)."
        )

# Body size limit for the API (bytes); larger bodies get 413 before they are parsed.
MAX_BODY_BYTES = env_int("MAX_BODY_BYTES", 256 * 1024, minimum=1024)
MAX_MESSAGE_LENGTH = env_int("MAX_MESSAGE_LENGTH", 4000, minimum=1)
MAX_SCHEMA_PROPERTIES = env_int("MAX_SCHEMA_PROPERTIES", 50, minimum=1)
MAX_SCHEMA_OPTIONS = env_int("MAX_SCHEMA_OPTIONS", 200, minimum=1)
# JSON from outside (API bodies with their `context`, WebSocket frames) nested deeper than this is refused (400).
MAX_JSON_DEPTH = env_int("MAX_JSON_DEPTH", 32, minimum=8)
MAX_LONG_POLL_SECONDS = env_int("MAX_LONG_POLL_SECONDS", 60, minimum=1)
# The server processes' garbage collector (reviewhub/gc_tuning.py): young-generation threshold, then how many
# collections of each generation before the next one is considered. Python's default is 700,10,10; the last value
# is raised so that a full collection (~0.8 s with 5,000 sockets open) is rare.
GC_THRESHOLDS = env_ints("GC_THRESHOLDS", [700, 10, 1000], count=3, minimum=1)
# Poll the database this often while long-polling, so a lost push never strands a waiter.
LONG_POLL_RECHECK_SECONDS = env_int("LONG_POLL_RECHECK_SECONDS", 2, minimum=1)
# An agent socket re-reads its outbox and its key this often, so a lost push or revocation is still caught.
# Every idle socket pays one database read per interval: 5 s made 5,000 idle sockets cost more than a core
# (BENCHMARKS.md #4); pushes and revocations still arrive at once, this is only the net under a lost push.
AGENT_SOCKET_RECHECK_SECONDS = env_int("AGENT_SOCKET_RECHECK_SECONDS", 30, minimum=1)
# Frames a WebSocket (agent or page) may have waiting for a client that reads slowly; beyond either bound the socket
# is closed with 4008 and the client resumes from its cursor (elicitation/delivery/socket_base.py).
SOCKET_SEND_BUFFER_FRAMES = env_int("SOCKET_SEND_BUFFER_FRAMES", 1000, minimum=10)
SOCKET_SEND_BUFFER_BYTES = env_int("SOCKET_SEND_BUFFER_BYTES", 1024 * 1024, minimum=64 * 1024)
# Agent-socket handshakes spending a `?ticket=` at once, per process (keys are read in batches): a reconnect storm
# queues here instead of taking every waiter thread from rechecks, long-polls and replays.
AGENT_SOCKET_HANDSHAKE_CONCURRENCY = env_int("AGENT_SOCKET_HANDSHAKE_CONCURRENCY", 2, minimum=1)
# Handshakes between accept and hello at once (about as many as a dead peer process held); more are closed with
# 4013 at once and their clients back off.
AGENT_SOCKET_HANDSHAKE_QUEUE = env_int("AGENT_SOCKET_HANDSHAKE_QUEUE", 5000, minimum=1)
# Webhooks: attempts before a delivery is dead-lettered, per-attempt timeout, full-jitter exponential backoff.
# Agents choose callback URLs: in production they may not point into the server's own network (loopback,
# private, link-local addresses). Development and tests deliver to receivers on localhost.
WEBHOOK_ALLOW_PRIVATE_ADDRESSES = env_bool(
    "WEBHOOK_ALLOW_PRIVATE_ADDRESSES", not env_bool("REVIEWHUB_PRODUCTION", False)
)
WEBHOOK_MAX_ATTEMPTS = env_int("WEBHOOK_MAX_ATTEMPTS", 8, minimum=1)
WEBHOOK_TIMEOUT_SECONDS = env_int("WEBHOOK_TIMEOUT_SECONDS", 5, minimum=1)
WEBHOOK_BACKOFF_BASE_SECONDS = env_int("WEBHOOK_BACKOFF_BASE_SECONDS", 2, minimum=1)
WEBHOOK_BACKOFF_CAP_SECONDS = env_int("WEBHOOK_BACKOFF_CAP_SECONDS", 600, minimum=1)
DEFAULT_DEADLINE_SECONDS = env_int("DEFAULT_DEADLINE_SECONDS", 3600, minimum=1)
DEFAULT_LEASE_SECONDS = env_int("DEFAULT_LEASE_SECONDS", 300, minimum=5)
# API request rates (N/second|min|hour|day, or "off"), per agent key and per reviewer account, counted in the
# cache: Redis in services mode, so the limit holds across processes (elicitation.api.throttling).
AGENT_RATE = env_rate("AGENT_RATE", "600/min")
REVIEWER_RATE = env_rate("REVIEWER_RATE", "1200/min")

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "DEFAULT_PERMISSION_CLASSES": [],
    # Lone surrogates and JSON nested deeper than MAX_JSON_DEPTH are refused with 400 naming the field.
    "DEFAULT_RENDERER_CLASSES": ["elicitation.api.parsers.SafeJSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["elicitation.api.parsers.UntrustedJSONParser"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "elicitation.api.errors.api_exception_handler",
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "ReviewHub API",
    "DESCRIPTION": "Human-in-the-loop review queue for AI agents (MCP elicitation).",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    # Swagger UI's assets come from the installed sidecar package, never from a third-party host.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    # 429/503 with Retry-After, 413/415 on bodies, 401 on authenticated operations: documented on every operation.
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "elicitation.api.schema_hooks.add_common_responses",
    ],
}

# --- Static files, i18n ----------------------------------------------------------------------------------------
STATIC_URL = "/static/"
STATICFILES_DIRS = [TEMPLATES_AND_STATIC_DIR / "static"]
# Set (e.g. /app/staticfiles) where collectstatic runs, as in the Docker image; unset, files come from finders.
STATIC_ROOT = env_str("STATIC_ROOT") or None
# Each process serves /static/ itself with WhiteNoise, inside the middleware chain so files get the pages'
# security headers; one process is a complete deployment. Put a caching proxy in front for heavy traffic.
SERVE_STATIC = env_bool("SERVE_STATIC", True)
if SERVE_STATIC:
    MIDDLEWARE.insert(
        MIDDLEWARE.index("django.contrib.sessions.middleware.SessionMiddleware"),
        "whitenoise.middleware.WhiteNoiseMiddleware",
    )
# Without collectstatic (STATIC_ROOT unset) WhiteNoise indexes the finders' files when a process starts.
WHITENOISE_USE_FINDERS = STATIC_ROOT is None
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "reviewhub@localhost")
# The SMTP server (with EMAIL_BACKEND=django.core.mail.backends.smtp.EmailBackend) reach's e-mails go through.
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT", 10, minimum=1)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    # Every handler redacts hosted-flow secrets, API keys and flow pages' POST data (elicitation.flows.redaction).
    "filters": {
        "redact_secrets": {"()": "elicitation.flows.redaction.RedactSecretsFilter"},
        "require_debug_false": {"()": "django.utils.log.RequireDebugFalse"},
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain", "filters": ["redact_secrets"]},
        "mail_admins": {
            "class": "django.utils.log.AdminEmailHandler",
            "level": "ERROR",
            "filters": ["require_debug_false", "redact_secrets"],
        },
    },
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        # Replaces Django's default "django" handlers, which would otherwise write without the redaction filter.
        "django": {"handlers": ["mail_admins"], "level": "INFO", "propagate": True},
        "django.channels.server": {"level": "WARNING"},
    },
}
# Error reports mask flow requests' POST data and sensitive_variables() locals even with DEBUG on.
DEFAULT_EXCEPTION_REPORTER_FILTER = "elicitation.flows.redaction.FlowSafeExceptionReporterFilter"
# Bodies without a Content-Length are cut off at the same limit when read.
DATA_UPLOAD_MAX_MEMORY_SIZE = MAX_BODY_BYTES
