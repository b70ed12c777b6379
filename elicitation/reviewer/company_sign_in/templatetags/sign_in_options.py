"""`{% sign_in_options as sign_in %}`: what the sign-in page offers, read from settings so that every view that
renders it (the sign-in view, the login throttle's 429) shows the same choices."""

from dataclasses import dataclass

from django import template
from django.conf import settings

register = template.Library()


@dataclass(frozen=True)
class SignInOptions:
    provider_name: str  # empty when company sign-in is off
    passwords: bool


@register.simple_tag
def sign_in_options() -> SignInOptions:
    return SignInOptions(
        provider_name=settings.OIDC_PROVIDER_NAME if settings.OIDC_ISSUER else "",
        passwords=settings.LOCAL_PASSWORD_LOGIN,
    )
