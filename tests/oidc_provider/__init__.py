"""A real OpenID Connect provider for tests: django-oauth-toolkit's, as a Django project of its own (settings, URLs,
a login page, a validator adding `groups`, `preferred_username` and `email` claims), served by uvicorn on a loopback
port with its own SQLite database and RSA key. `server.OIDCProvider` starts it; `accounts` sets its users and client.
"""
