from django.urls import path

from elicitation.api import agent_views, flow_views, reviewer_views

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
]
