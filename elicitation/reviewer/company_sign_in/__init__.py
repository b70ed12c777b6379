"""Company sign-in: reviewers sign in with the company's OpenID Connect provider, through mozilla-django-oidc.

- `provider.py`: the provider's endpoints, read from OIDC_ISSUER's discovery document.
- `backend.py`: the authentication backend (the ID token's signature checked against the issuer's JWKS, and its
  `iss`, `aud`, `exp`, `iat` and `nonce`), and the staff-only password backend used when LOCAL_PASSWORD_LOGIN is off.
- `accounts.py`: the account a sign-in lands in, found by the provider's (issuer, `sub`) pair, made on first sign-in.
- `queue_grants.py`: the groups claim → queue memberships and supervision, set again at every sign-in.
- `views.py`: the sign-in page and the two legs of the authorization code flow.

A Django app of its own (label `company_sign_in`) so that its one table, the (issuer, `sub`) → account link, comes
with migrations of its own; it is installed always and does nothing until OIDC_ISSUER is set.
"""
