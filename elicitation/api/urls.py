from django.urls import path

from elicitation.api import agent_views, flow_views, reviewer_views, rules_views, slack_views

urlpatterns = [
    # Agents
    path("requests", agent_views.RequestListView.as_view(), name="api-requests"),
    path("requests/url-complete", agent_views.UrlFlowCompleteView.as_view(), name="api-url-complete"),
    path("requests/<uuid:request_id>", agent_views.RequestDetailView.as_view(), name="api-request"),
    path(
        "requests/<uuid:request_id>/cancel",
        agent_views.RequestCancelView.as_view(),
        name="api-request-cancel",
    ),
    path("events", agent_views.EventFeedView.as_view(), name="api-events"),
    path("ws-ticket", agent_views.WsTicketView.as_view(), name="api-ws-ticket"),
    # Hosted secret flows (flows:secrets scope)
    path("flows", flow_views.FlowListView.as_view(), name="api-flows"),
    path("flows/<uuid:flow_id>", flow_views.FlowDetailView.as_view(), name="api-flow"),
    path("flows/<uuid:flow_id>/retrieve", flow_views.FlowRetrieveView.as_view(), name="api-flow-retrieve"),
    path("slack/interactions", slack_views.interactions, name="api-slack-interactions"),
    # Reviewers
    path("review/queues", reviewer_views.QueueListView.as_view(), name="api-review-queues"),
    path(
        "review/queues/<slug:slug>/requests",
        reviewer_views.QueueRequestsView.as_view(),
        name="api-review-queue",
    ),
    path(
        "review/queues/<slug:slug>/claim-next", reviewer_views.ClaimNextView.as_view(), name="api-claim-next"
    ),
    path(
        "review/requests/<uuid:request_id>",
        reviewer_views.ReviewRequestDetailView.as_view(),
        name="api-review",
    ),
    path("review/requests/<uuid:request_id>/claim", reviewer_views.ClaimView.as_view(), name="api-claim"),
    path(
        "review/requests/<uuid:request_id>/release", reviewer_views.ReleaseView.as_view(), name="api-release"
    ),
    path(
        "review/requests/<uuid:request_id>/heartbeat",
        reviewer_views.HeartbeatView.as_view(),
        name="api-heartbeat",
    ),
    path(
        "review/requests/<uuid:request_id>/takeover",
        reviewer_views.TakeOverView.as_view(),
        name="api-takeover",
    ),
    path("review/requests/<uuid:request_id>/drafts", reviewer_views.DraftView.as_view(), name="api-draft"),
    path(
        "review/requests/<uuid:request_id>/respond", reviewer_views.RespondView.as_view(), name="api-respond"
    ),
    # Decision policies: a queue's rules (reviewers read, supervisors change) and remembered decisions
    path("queues/<slug:slug>/rules", rules_views.QueueRulesView.as_view(), name="api-queue-rules"),
    path(
        "queues/<slug:slug>/rules/<int:rule_id>", rules_views.QueueRuleView.as_view(), name="api-queue-rule"
    ),
    path(
        "queues/<slug:slug>/rules/<int:rule_id>/revoke",
        rules_views.RevokeRuleView.as_view(),
        name="api-queue-rule-revoke",
    ),
    path(
        "queues/<slug:slug>/remembered",
        rules_views.RememberedDecisionsView.as_view(),
        name="api-queue-remembered",
    ),
]
