"""`--queues` and `--create-queues`, shared by `create_agent` and `create_reviewer`.

A typo (`--queues defualt`) used to create a queue nobody reviews, and `--queues 'no such!'` one whose slug no page
can route to: now an unknown queue is refused unless `--create-queues` is given, and an invalid slug always is,
by the Queue model's own slug validators (the rule the admin applies).
"""

from django.core.exceptions import ValidationError
from django.core.management.base import CommandError, CommandParser

from elicitation.models import Queue

LISTED_QUEUES = 20  # an error names at most this many existing queues


def add_queue_arguments(parser: CommandParser) -> None:
    parser.add_argument("--queues", required=True, help="Comma-separated slugs of existing queues.")
    parser.add_argument(
        "--create-queues", action="store_true", help="Create the queues named in --queues that do not exist."
    )


def checked_queue_slugs(option: str, *, create: bool) -> list[str]:
    """The slugs of a `--queues` value, each a valid slug and, unless `create`, an existing queue.

    Called before the command writes anything, so a refusal leaves no user, agent or queue behind."""
    slugs = list(dict.fromkeys(slug.strip() for slug in option.split(",") if slug.strip()))
    if not slugs:
        raise CommandError("--queues names no queue: give at least one queue slug.")
    slug_field = Queue._meta.get_field("slug")
    invalid = []
    for slug in slugs:
        try:
            slug_field.run_validators(slug)
        except ValidationError as exc:
            invalid.append(f"{slug!r} ({' '.join(exc.messages)})")
    if invalid:
        raise CommandError(f"Invalid queue slug: {'; '.join(invalid)}")
    if create:
        return slugs
    existing = set(Queue.objects.filter(slug__in=slugs).values_list("slug", flat=True))
    unknown = [slug for slug in slugs if slug not in existing]
    if unknown:
        known = list(Queue.objects.order_by("slug").values_list("slug", flat=True)[: LISTED_QUEUES + 1])
        listed = ", ".join(known[:LISTED_QUEUES]) + (", …" if len(known) > LISTED_QUEUES else "")
        raise CommandError(
            f"No such queue: {', '.join(unknown)}. Existing queues: {listed or 'none yet'}. "
            "Check the spelling, or add --create-queues to create them."
        )
    return slugs
