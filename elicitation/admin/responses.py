"""The two pages the admin answers an action with: the one page a new key is ever shown on, and the confirmation
before an irreversible action."""

from typing import Any

from django.contrib import admin
from django.contrib.admin import helpers
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse

ISSUED_KEYS_TEMPLATE = "admin/elicitation/issued_keys.html"
CONFIRM_TEMPLATE = "admin/elicitation/confirm_action.html"


def issued_keys_response(
    request: HttpRequest, title: str, keys: list[dict[str, str]], back_url: str
) -> TemplateResponse:
    """The one page a full key appears on. Rendered as the response to the POST that issued it and never stored,
    so reloading or going back cannot show it again; no-store keeps it out of caches."""
    response = TemplateResponse(
        request,
        ISSUED_KEYS_TEMPLATE,
        {**admin.site.each_context(request), "title": title, "keys": keys, "back_url": back_url},
    )
    response["Cache-Control"] = "no-store"
    return response


def confirm_response(
    request: HttpRequest,
    modeladmin: admin.ModelAdmin[Any],
    queryset: QuerySet[Any],
    *,
    action: str,
    title: str,
    warning: str,
    button: str,
) -> TemplateResponse:
    """An intermediate page (like Django's delete confirmation) for irreversible actions."""
    return TemplateResponse(
        request,
        CONFIRM_TEMPLATE,
        {
            **admin.site.each_context(request),
            "title": title,
            "warning": warning,
            "button": button,
            "action": action,
            "objects": list(queryset),
            "opts": modeladmin.model._meta,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        },
    )
