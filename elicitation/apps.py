from django.apps import AppConfig


class ElicitationConfig(AppConfig):
    name = "elicitation"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The core announces what happened through queue/signals.py; the edges listen. Wired here, once, so
        # the core never imports them.
        from elicitation.api import long_poll_answers  # noqa: PLC0415 - imports the models: only once apps are ready
        from elicitation.delivery import pushes, receivers  # noqa: PLC0415 - as above: they import the models

        receivers.connect()
        # A closing push carries the API's answer to the request's long-polls (pushes.long_poll_answer).
        pushes.render_long_poll_answers_with(long_poll_answers.request_body)
