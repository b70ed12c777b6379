import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reviewhub.settings")

app = Celery("reviewhub")
app.config_from_object("django.conf:settings", namespace="CELERY")
# Each package of the app keeps its own tasks module.
app.autodiscover_tasks(["elicitation.ops", "elicitation.flows", "elicitation.delivery"])
