"""`celery` for fault tests, with the webhook attempt lease shortened so a crashed attempt is retried in seconds
instead of a minute (the production value is the subject of no test here; the recovery path is)."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django

    django.setup()
    from elicitation.delivery import webhooks

    webhooks.ATTEMPT_LEASE_SECONDS = int(os.environ.get("FAULT_ATTEMPT_LEASE_SECONDS", "3"))
    from celery.__main__ import main

    sys.argv[0] = "celery"
    sys.exit(main())
