"""Django's template engine, except that a page never fails because of one stored string.

A lone UTF-16 surrogate stored before the API refused them (elicitation/queue/untrusted_json.py) cannot be
encoded as UTF-8, so the page holding it would answer 500 for every reviewer of the queue. Rendered text is
checked once (one C-speed encode) and such characters go out as U+FFFD.
"""

import logging
from typing import Any

from django.template.backends.django import DjangoTemplates, Template
from django.utils.safestring import SafeData, mark_safe

from elicitation.queue.untrusted_json import scrub_text

logger = logging.getLogger(__name__)


class SurrogateSafeTemplate(Template):
    def render(self, context: Any = None, request: Any = None) -> str:
        text: str = super().render(context, request)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            logger.warning("rendered a stored lone surrogate as U+FFFD; run `manage.py repair_text`")
            repaired = scrub_text(text)
            return mark_safe(repaired) if isinstance(text, SafeData) else repaired  # noqa: S308 (was safe)
        return text


class SurrogateSafeTemplates(DjangoTemplates):
    def from_string(self, template_code: str) -> SurrogateSafeTemplate:
        return SurrogateSafeTemplate(self.engine.from_string(template_code), self)

    def get_template(self, template_name: str) -> SurrogateSafeTemplate:
        template = super().get_template(template_name)
        return SurrogateSafeTemplate(template.template, self)
