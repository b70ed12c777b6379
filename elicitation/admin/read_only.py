"""Admin pages over rows that only services write."""

from typing import Any

from django.http import HttpRequest


class ReadOnlyMixin:
    """Rows that only services write: the admin may look and run actions, never add, edit or delete."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
