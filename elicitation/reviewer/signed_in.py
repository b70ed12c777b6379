"""The request a reviewer page gets once `login_required` has let it through."""

from typing import TypeGuard

from django.contrib.auth.models import User
from django.http import HttpRequest


class SignedInRequest(HttpRequest):
    """An `HttpRequest` whose `user` is an account, never `AnonymousUser`: what `login_required` (and the admin
    site, for staff) hands a view. For the type checker only; Django builds the request as always."""

    user: User


def is_signed_in(request: HttpRequest) -> TypeGuard[SignedInRequest]:
    """`request.user.is_authenticated`, read by the type checker as "this is a SignedInRequest"."""
    return request.user.is_authenticated
