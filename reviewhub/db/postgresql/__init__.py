"""Django's PostgreSQL backend with ReviewHub's connection pool (base.py)."""
