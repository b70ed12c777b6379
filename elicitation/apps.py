from django.apps import AppConfig


class ElicitationConfig(AppConfig):
    name = "elicitation"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The core announces what happened through queue/signals.py; the edges listen. Wired here, once, so
        # the core never imports them.
        from elicitation.delivery import receivers  # noqa: PLC0415 - imports the models: only once apps are ready

        receivers.connect()
