"""A queue's decision policy over REST: `/api/v1/queues/{slug}/rules`. Reviewers of the queue read it (rules are
visible to the people they act for); supervisors change it. JSON or YAML both ways (`Content-Type` /
`Accept: application/yaml`, or `?format=yaml`), the same shape as a rule file kept in version control.

Bodies in either syntax go through `rules.load_rule_file`, as the admin and `import_rules` do: size and nesting
depth are checked before a parser builds anything. Every change is validated as the signed-in user writes it (a
route only into a queue they supervise)."""

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.parsers import BaseParser, JSONParser
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from elicitation.api import serializers as s
from elicitation.api.authentication import ReviewerRequest
from elicitation.api.parsers import SafeJSONRenderer
from elicitation.api.reviewer_views import ReviewerAPIView
from elicitation.models import AnswerRule, Queue
from elicitation.queue import access, rules
from elicitation.queue.errors import NotFoundError

ERRORS = {code: OpenApiResponse(s.ErrorSerializer) for code in (400, 401, 403, 404)}
RULE_FILE = {"type": "object", "description": "A rule file: mode, unmatched, round_cap, quorum, rules[]."}
RULE = {"type": "object", "description": "One answer rule: name, match, action and its arguments."}
RULE_FILE_BODY = {"application/json": RULE_FILE, "application/yaml": RULE_FILE}
RULE_BODY = {"application/json": RULE, "application/yaml": RULE}


class YamlRenderer(BaseRenderer):
    media_type = "application/yaml"
    format = "yaml"
    charset = "utf-8"

    def render(
        self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None
    ) -> bytes:
        return rules.dump_yaml(data if isinstance(data, dict) else {"data": data}).encode()


class YamlParser(BaseParser):
    media_type = "application/yaml"

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        return rules.load_rule_file(stream.read() if stream is not None else b"", syntax="yaml")


class RuleFileJSONParser(JSONParser):
    """A JSON rule file or rule: the API's JSON checks (depth, lone surrogates), with the depth counted on the
    text before it is parsed, as for YAML. NaN and the infinities parse, then fail validation with their path."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        return rules.load_rule_file(stream.read() if stream is not None else b"", syntax="json")


def rule_view(rule: AnswerRule) -> dict[str, Any]:
    return {
        "id": rule.pk,
        "position": rule.position,
        **rules.rule_data(rule),
        "remembered": rule.remembered_from_id is not None,
        "rememberedFrom": str(rule.remembered_from_id) if rule.remembered_from_id else None,
        "createdBy": rule.created_by.get_username() if rule.created_by else None,
        "revokedAt": rule.revoked_at.isoformat() if rule.revoked_at else None,
    }


class RulesAPIView(ReviewerAPIView):
    parser_classes = [RuleFileJSONParser, YamlParser]
    renderer_classes = [SafeJSONRenderer, YamlRenderer]

    def queue_for_reading(self, slug: str) -> Queue:
        return access.reviewable_queue(self.request.user, slug)

    def queue_for_writing(self, slug: str) -> Queue:
        queue = access.reviewable_queue(self.request.user, slug)
        access.check_supervisor(queue, self.request.user)
        return queue

    def rule(self, queue: Queue, rule_id: int) -> AnswerRule:
        found = (
            AnswerRule.objects.select_related("route_to", "created_by")
            .filter(queue=queue, pk=rule_id)
            .first()
        )
        if found is None:
            raise NotFoundError("No such rule.")
        return found


class QueueRulesView(RulesAPIView):
    @extend_schema(
        operation_id="queue_rules_retrieve",
        responses={200: RULE_FILE, **ERRORS},
        summary="The queue's rule file (policy and ordered rules); `?format=yaml` for YAML",
    )
    def get(self, request: Request, slug: str) -> Response:
        queue = self.queue_for_reading(slug)
        return Response(rules.policy_data(queue))

    @extend_schema(
        operation_id="queue_rules_replace",
        request=RULE_FILE_BODY,
        responses={200: RULE_FILE, **ERRORS},
        summary="Supervisor: replace the queue's policy and rules with a rule file (JSON or YAML)",
    )
    def put(self, request: ReviewerRequest, slug: str) -> Response:
        queue = self.queue_for_writing(slug)
        rules.replace_policy(queue, request.data, user=request.user)
        return Response(rules.policy_data(queue))

    @extend_schema(
        operation_id="queue_rules_add",
        request=RULE_BODY,
        responses={201: RULE, **ERRORS},
        summary="Supervisor: append one rule after the queue's last",
    )
    def post(self, request: ReviewerRequest, slug: str) -> Response:
        queue = self.queue_for_writing(slug)
        rule = rules.add_rule(queue, request.data, user=request.user)
        return Response(rule_view(rule), status=status.HTTP_201_CREATED)


class QueueRuleView(RulesAPIView):
    @extend_schema(operation_id="queue_rule_retrieve", responses={200: RULE, **ERRORS}, summary="One rule")
    def get(self, request: Request, slug: str, rule_id: int) -> Response:
        return Response(rule_view(self.rule(self.queue_for_reading(slug), rule_id)))

    @extend_schema(
        operation_id="queue_rule_update",
        request=RULE_BODY,
        responses={200: RULE, **ERRORS},
        summary="Supervisor: rewrite one rule (its place in the order stays)",
    )
    def put(self, request: ReviewerRequest, slug: str, rule_id: int) -> Response:
        rule = self.rule(self.queue_for_writing(slug), rule_id)
        return Response(rule_view(rules.update_rule(rule, request.data, user=request.user)))

    @extend_schema(
        operation_id="queue_rule_delete",
        responses={204: None, **ERRORS},
        summary="Supervisor: delete a rule (remembered decisions are revoked instead, to keep their history)",
    )
    def delete(self, request: Request, slug: str, rule_id: int) -> Response:
        rule = self.rule(self.queue_for_writing(slug), rule_id)
        if rule.remembered_from_id is not None:
            rules.revoke_rule(rule)
        else:
            rules.delete_rule(rule)
        return Response(status=status.HTTP_204_NO_CONTENT)


class RememberedDecisionsView(RulesAPIView):
    @extend_schema(
        operation_id="queue_remembered_list",
        responses={200: {"type": "array", "items": RULE}, **ERRORS},
        summary="Supervisor: the queue's remembered decisions, live, expired and revoked",
    )
    def get(self, request: Request, slug: str) -> Response:
        queue = self.queue_for_writing(slug)
        rows = rules.remembered_decisions(queue)
        return Response([rule_view(rule) for rule in rows])


class RevokeRuleView(RulesAPIView):
    @extend_schema(
        operation_id="queue_rule_revoke",
        request=None,
        responses={200: RULE, **ERRORS},
        summary="Supervisor: revoke a rule or remembered decision from now on",
    )
    def post(self, request: Request, slug: str, rule_id: int) -> Response:
        rule = self.rule(self.queue_for_writing(slug), rule_id)
        return Response(rule_view(rules.revoke_rule(rule)))
