"""The account a company sign-in lands in: found by the provider's (issuer, `sub`), made at the first sign-in, and
brought up to date from the claims (name, e-mail, queue access) at every one.

The username is chosen once, at creation: `preferred_username`, else `email`, else `sub`, reduced to the characters
Django's usernames allow. When a local account (or another company account) already has it, in any letter case, a
short digest of the provider's subject is added (`alice` → `alice-3f2a9c`): a company sign-in never lands in an
account it did not create, whatever name or address the provider's user chose. Accounts made here have no usable
password, so the password form cannot open them either.
"""

import hashlib
import re
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, User
from django.core.exceptions import SuspiciousOperation
from django.db import IntegrityError, transaction
from django.db.models import QuerySet

from elicitation.reviewer.company_sign_in.models import CompanyIdentity
from elicitation.reviewer.company_sign_in.queue_grants import (
    apply_queue_grants,
    groups_in_claims,
    queue_grants,
)

NOT_USERNAME_CHARACTERS = re.compile(r"[^\w.@+-]")  # Django's UnicodeUsernameValidator allows [\w.@+-]
USERNAME_ROOM = 130  # of the 150 a username may hold, leaving room for the digest


def linked_users(issuer: str, subject: str) -> QuerySet[Any]:
    return get_user_model().objects.filter(company_identity__issuer=issuer, company_identity__subject=subject)


def choose_username(issuer: str, claims: Mapping[str, Any]) -> str:
    subject = str(claims["sub"])
    wanted = next(
        (
            value.strip()
            for value in (claims.get("preferred_username"), claims.get("email"), subject)
            if isinstance(value, str) and value.strip()
        ),
        subject,
    )
    base = NOT_USERNAME_CHARACTERS.sub("", wanted)[:USERNAME_ROOM] or "reviewer"
    digest = hashlib.sha256(f"{issuer}\0{subject}".encode()).hexdigest()
    users = get_user_model().objects
    for candidate in (base, f"{base}-{digest[:6]}", f"{base}-{digest[:16]}"):
        if not users.filter(username__iexact=candidate).exists():
            return candidate
    raise SuspiciousOperation(f"no free username for {base!r}")


def refresh_account(user: AbstractBaseUser, claims: Mapping[str, Any]) -> AbstractBaseUser:
    """Name and e-mail from the claims, and queue access from the groups claim, in one transaction."""
    account: Any = user
    profile = {
        "first_name": claims.get("given_name"),
        "last_name": claims.get("family_name"),
        # An address the provider says it has not verified is not one to send notices to.
        "email": claims.get("email") if claims.get("email_verified") is not False else None,
    }
    changed = []
    for field, value in profile.items():
        if not isinstance(value, str):
            continue
        value = value.strip()[: account._meta.get_field(field).max_length]
        if getattr(account, field) != value:
            setattr(account, field, value)
            changed.append(field)
    grants = queue_grants(
        groups_in_claims(claims, settings.OIDC_GROUPS_CLAIM),
        prefix=settings.OIDC_GROUP_PREFIX,
        mapping=settings.OIDC_GROUP_QUEUES,
    )
    with transaction.atomic():
        if changed:
            account.save(update_fields=changed)
        apply_queue_grants(account, grants)
    return user


def create_account(issuer: str, claims: Mapping[str, Any]) -> AbstractBaseUser:
    """A new account linked to (issuer, `sub`); when a parallel first sign-in of the same person made it first,
    that one."""
    subject = str(claims["sub"])
    try:
        with transaction.atomic():
            # No password given: Django stores an unusable one.
            user: User = get_user_model().objects.create_user(choose_username(issuer, claims))
            CompanyIdentity.objects.create(issuer=issuer, subject=subject, user=user)
    except IntegrityError:
        existing = linked_users(issuer, subject).first()
        if existing is None:
            raise
        user = existing
    return refresh_account(user, claims)
