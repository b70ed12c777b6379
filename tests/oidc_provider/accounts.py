"""Set the test provider's data, in its own process (its database is not the test run's):

    python -m tests.oidc_provider.accounts client CLIENT_ID SECRET REDIRECT_URI
    python -m tests.oidc_provider.accounts user USERNAME PASSWORD EMAIL [GROUP ...]

`user` creates the user or updates it, its groups set to exactly those given: a group removed here is removed at the
provider, as an administrator would do it."""

import os
import sys

import django


def set_client(client_id: str, secret: str, redirect_uri: str) -> None:
    from oauth2_provider.models import Application

    Application.objects.update_or_create(
        client_id=client_id,
        defaults={
            "name": "ReviewHub",
            "client_secret": secret,  # hashed on save
            "client_type": Application.CLIENT_CONFIDENTIAL,
            "authorization_grant_type": Application.GRANT_AUTHORIZATION_CODE,
            "redirect_uris": redirect_uri,
            "algorithm": Application.RS256_ALGORITHM,
            "skip_authorization": True,  # a company's own apps skip the consent screen
        },
    )


def set_user(username: str, password: str, email: str, groups: list[str]) -> None:
    from django.contrib.auth.models import Group, User

    user, _ = User.objects.get_or_create(username=username)
    user.email = email
    user.first_name = username.capitalize()
    if not user.check_password(password):
        # Only when it changes: a new hash would end the user's session at the provider, as in Django anywhere.
        user.set_password(password)
    user.save()
    user.groups.set([Group.objects.get_or_create(name=name)[0] for name in groups])


def main(argv: list[str]) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.oidc_provider.settings")
    django.setup()
    command, *args = argv
    if command == "client":
        set_client(*args)
    elif command == "user":
        set_user(args[0], args[1], args[2], args[3:])
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
