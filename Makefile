# ReviewHub: `make run` to try it, `make test` to test it. Everything installs into .venv on first use.
PYTHON ?= $(shell for p in python3.13 python3.12 python3.11 python3; do command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null && echo $$p && break; done)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SERVICES_ENV := DATABASE_URL=$${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test} REDIS_URL=$${REDIS_URL:-redis://127.0.0.1:6379/0}
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: run test test-services lint format bench browser clean

$(STAMP): pyproject.toml
	@test -n "$(PYTHON)" || { echo "ReviewHub needs Python 3.11 or newer on PATH (python3.11, python3.12 or python3.13)."; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev,mcp]"
	@touch $(STAMP)

run: $(STAMP)
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py seed_demo
	@echo "ReviewHub on http://$(HOST):$(PORT)/  (API docs: /api/docs/, admin: /admin/)"
	DEBUG=$${DEBUG:-true} $(BIN)/daphne -b $(HOST) -p $(PORT) reviewhub.asgi:application

# Browser tests drive Debian's Chromium; install it when we can (root with apt), otherwise say so loudly.
browser:
	@if [ ! -x /usr/bin/chromium ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "Installing Debian's chromium for the browser tests..."; \
	    (apt-get install -y -qq chromium >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null)); \
	  else echo "WARNING: /usr/bin/chromium is missing: browser tests will be skipped (apt-get install chromium)."; fi; \
	fi

test: $(STAMP) browser
	$(BIN)/pytest $(PYTEST_ARGS)

test-services: $(STAMP) browser
	$(SERVICES_ENV) $(BIN)/pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy elicitation reviewhub reviewhub_client
	$(BIN)/python manage.py makemigrations --check --dry-run

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

clean:
	rm -rf $(VENV) reviewhub.sqlite3* reviewhub-test.sqlite3* test-output .pytest_cache .mypy_cache .ruff_cache
