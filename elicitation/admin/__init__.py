"""The operator's console. Every change goes through a service, secrets never reach a page: keys are shown once
(in the response that issued them, never stored), hosted-flow ciphertext and answers are never rendered, and the
audit trail is read-only. One module per model admin; importing them here is what registers them."""

from django.contrib import admin

from elicitation.admin import (
    agents,  # noqa: F401 - registers agents and their keys
    audit_events,  # noqa: F401 - registers the audit trail
    hosted_flows,  # noqa: F401 - registers hosted flows (status only)
    mcp_grants,  # noqa: F401 - registers the MCP OAuth consents
    passkeys,  # noqa: F401 - registers reviewers' passkeys
    policies,  # noqa: F401 - registers decision policies and rules
    push_subscriptions,  # noqa: F401 - registers reviewers' Web Push browsers
    queues,  # noqa: F401 - registers queues
    reach,  # noqa: F401 - registers reach rules, escalation policies, reviewer preferences and notices
    requests,  # noqa: F401 - registers elicitation requests
    reviewer_tokens,  # noqa: F401 - registers reviewer tokens
    webhooks,  # noqa: F401 - registers webhook deliveries
)

admin.site.site_header = "ReviewHub administration"
admin.site.site_title = "ReviewHub admin"
admin.site.index_title = "Administration"
