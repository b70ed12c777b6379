"""A reviewer's own reach preferences, self-service: time zone, quiet hours, e-mail mode and the linked Slack account.

Only ever the signed-in user's own row (`ReviewerReach`, created on the first save). A Slack account is linked only
when Slack itself says the member's confirmed e-mail is this reviewer's address, the same proof the interaction
endpoint accepts for an unlinked member (delivery/slack_interactions.reviewer_for): typing someone else's member
ID must not let a reviewer receive their DMs or let that member answer as the reviewer. The e-mail address is not
editable here, since it is what the Slack proof rests on. Desktop notifications and the keyboard preferences are
kept by the browser (static/reviewhub/preferences.js), not here.
"""

import logging
import re
from datetime import time
from functools import cache
from typing import Any
from zoneinfo import ZoneInfo, available_timezones

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods
from slack_sdk.errors import SlackApiError

from elicitation.delivery import routing, slack, web_push
from elicitation.models import EmailMode, Passkey, ReviewerReach
from elicitation.queue import clock
from elicitation.reviewer.errors import domain_errors_as_pages
from elicitation.reviewer.signed_in import SignedInRequest

logger = logging.getLogger(__name__)

# Slack member IDs: U… for ordinary members, W… for Enterprise Grid ones.
SLACK_MEMBER_ID = re.compile(r"^[UW][A-Z0-9]{2,30}$")
SECTION_PREFERENCES = "preferences"
SECTION_SLACK_LINK = "slack-link"
SECTION_SLACK_UNLINK = "slack-unlink"


@cache
def time_zone_names() -> list[str]:
    return sorted(available_timezones())


class ReachPreferencesForm(forms.Form):
    time_zone = forms.CharField(
        max_length=64,
        label="Time zone",
        widget=forms.TextInput(
            attrs={"list": "time-zone-names", "autocomplete": "off", "spellcheck": "false"}
        ),
        help_text="Your quiet hours are read in this zone, e.g. Europe/Paris or America/New_York.",
    )
    quiet_start = forms.TimeField(
        required=False,
        label="Quiet from",
        widget=forms.TimeInput(attrs={"type": "time"}, format="%H:%M"),
    )
    quiet_end = forms.TimeField(
        required=False,
        label="Quiet until",
        widget=forms.TimeInput(attrs={"type": "time"}, format="%H:%M"),
        help_text="No e-mail or Slack message reaches you between these times; they may span midnight "
        "(22:00 to 07:00). Leave both empty for none.",
    )
    email_mode = forms.ChoiceField(
        choices=EmailMode.choices, widget=forms.RadioSelect, label="E-mail about new requests"
    )
    answer_undo = forms.BooleanField(
        required=False,
        label="Hold my answers 5 seconds, with an Undo, before the agent is told",
        help_text="The next request opens at once either way; without it the agent is told as you send.",
    )

    def clean_time_zone(self) -> str:
        name = str(self.cleaned_data["time_zone"]).strip()
        if name not in time_zone_names():
            raise forms.ValidationError(
                "Not a time zone we know: pick one from the list (e.g. Europe/Paris)."
            )
        return name

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        start, end = data.get("quiet_start"), data.get("quiet_end")
        if (start is None) != (end is None) and "quiet_start" not in self.errors:
            missing = "quiet_end" if end is None else "quiet_start"
            self.add_error(missing, "Give both times, or leave both empty.")
        elif start is not None and start == end:
            self.add_error("quiet_end", "Quiet hours cannot start and end at the same time.")
        return data


class SlackLinkForm(forms.Form):
    prefix = "slack"
    slack_user_id = forms.CharField(
        max_length=32,
        label="Your Slack member ID",
        help_text="In Slack: your profile → ⋮ → Copy member ID (it starts with U).",
    )

    def clean_slack_user_id(self) -> str:
        value = str(self.cleaned_data["slack_user_id"]).strip().upper()
        if not SLACK_MEMBER_ID.match(value):
            raise forms.ValidationError(
                "A Slack member ID looks like U012AB3CD: a U or W, then letters and digits."
            )
        return value


def own_preferences(user: User) -> ReviewerReach:
    """The user's saved row, or an unsaved one with the model's defaults (GET writes nothing)."""
    found = ReviewerReach.objects.filter(user=user).first()
    return found if found is not None else ReviewerReach(user=user)


def save_preferences(user: User, data: dict[str, Any]) -> ReviewerReach:
    fields = {
        name: data[name] for name in ("time_zone", "quiet_start", "quiet_end", "email_mode", "answer_undo")
    }
    prefs, _ = ReviewerReach.objects.update_or_create(user=user, defaults=fields)
    return prefs


def slack_linking_available(user: User) -> bool:
    return bool(settings.SLACK_BOT_TOKEN) and bool(user.email)


def slack_problem(user: User, member_id: str) -> str:
    """Why `member_id` may not be linked to `user`, or "" when Slack vouches that it is theirs."""
    try:
        info = slack.client().users_info(user=member_id)
    except SlackApiError as exc:
        error = exc.response.get("error")
        if error in ("user_not_found", "invalid_user"):
            return "Slack knows no member with this ID."
        logger.info("Slack users.info for linking failed: %s", error)
        return "Slack refused the check just now; try again later."
    except OSError as exc:
        logger.info("Slack users.info for linking failed: %s", type(exc).__name__)
        return "Slack could not be reached just now; try again later."
    member = info.get("user") or {}
    address = str((member.get("profile") or {}).get("email") or "")
    if member.get("deleted") or member.get("is_bot"):
        return "This Slack member is deactivated or a bot."
    if member.get("id") not in (None, member_id):
        return "Slack answered about another member; try again."
    if not member.get("is_email_confirmed") or address.lower() != str(user.email).lower():
        return (
            "This Slack member's confirmed e-mail is not your ReviewHub address, so ReviewHub cannot tell "
            "it is yours. Ask an administrator to link it."
        )
    return ""


def linked_to_someone_else(user: User, member_id: str) -> bool:
    return ReviewerReach.objects.filter(slack_user_id=member_id).exclude(user=user).exists()


def link_slack(user: User, member_id: str) -> str:
    """Link the member to the user; "" on success, else why not (already someone else's)."""
    if linked_to_someone_else(user, member_id):
        return "This Slack member is already linked to another reviewer."
    try:
        with transaction.atomic():
            ReviewerReach.objects.update_or_create(user=user, defaults={"slack_user_id": member_id})
    except IntegrityError:  # linked to someone else between the check and the write
        return "This Slack member is already linked to another reviewer."
    return ""


def unlink_slack(user: User) -> None:
    ReviewerReach.objects.filter(user=user).update(slack_user_id=None)


def _page(
    request: SignedInRequest,
    prefs: ReviewerReach,
    form: ReachPreferencesForm | None = None,
    slack_form: SlackLinkForm | None = None,
    status: int = 200,
) -> HttpResponse:
    if form is None:
        form = ReachPreferencesForm(
            initial={
                "time_zone": prefs.time_zone,
                "quiet_start": prefs.quiet_start,
                "quiet_end": prefs.quiet_end,
                "email_mode": prefs.email_mode,
                "answer_undo": prefs.answer_undo,
            }
        )
    now = clock.now()
    try:
        local_now: time | None = now.astimezone(ZoneInfo(prefs.time_zone or "UTC")).time()
    except (KeyError, ValueError):
        local_now = None
    context = {
        "form": form,
        "slack_form": slack_form or SlackLinkForm(),
        "prefs": prefs,
        "time_zones": time_zone_names(),
        "local_now": local_now,
        "quiet_now": routing.in_quiet_hours(prefs, now),
        "slack_configured": bool(settings.SLACK_BOT_TOKEN),
        "slack_linkable": slack_linking_available(request.user),
        "push": web_push.page_context(request.user),
        "passkeys": Passkey.objects.filter(user=request.user),
        "sections": {
            "preferences": SECTION_PREFERENCES,
            "link": SECTION_SLACK_LINK,
            "unlink": SECTION_SLACK_UNLINK,
        },
    }
    return render(request, "review/preferences.html", context, status=status)


@login_required
@domain_errors_as_pages
@require_http_methods(["GET", "POST"])
def preferences_page(request: SignedInRequest) -> HttpResponse:
    """GET shows the signed-in reviewer's preferences; POST saves one section of them (never anyone else's)."""
    user = request.user
    prefs = own_preferences(user)
    if request.method == "GET":
        return _page(request, prefs)
    section = request.POST.get("section", SECTION_PREFERENCES)
    if section == SECTION_SLACK_UNLINK:
        unlink_slack(user)
        messages.success(request, "Your Slack account is no longer linked.")
        return redirect("preferences")
    if section == SECTION_SLACK_LINK:
        slack_form = SlackLinkForm(request.POST)
        if not slack_linking_available(user):
            slack_form.is_valid()
            slack_form.add_error(None, "Linking is not available here: ask an administrator.")
            return _page(request, prefs, slack_form=slack_form, status=400)
        if slack_form.is_valid():
            member_id = slack_form.cleaned_data["slack_user_id"]
            problem = slack_problem(user, member_id) or link_slack(user, member_id)
            if not problem:
                messages.success(request, f"Slack member {member_id} is now linked to you.")
                return redirect("preferences")
            slack_form.add_error("slack_user_id", problem)
        return _page(request, prefs, slack_form=slack_form, status=400)
    form = ReachPreferencesForm(request.POST)
    if not form.is_valid():
        return _page(request, prefs, form=form, status=400)
    save_preferences(user, form.cleaned_data)
    messages.success(request, "Your preferences are saved.")
    return redirect("preferences")
