"""`{% held_answers as banners %}`: the signed-in reviewer's answers still in their undo window, for the banner
of templates/review/_undo.html on the request and queue pages."""

from typing import Any

from django import template

from elicitation.reviewer import undo

register = template.Library()


@register.simple_tag(takes_context=True)
def held_answers(context: Any) -> list[undo.HeldBanner]:
    request = context.get("request")
    return undo.banners(request.user) if request is not None else []
