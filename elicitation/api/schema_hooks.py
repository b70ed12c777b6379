"""OpenAPI post-processing: the answers every API operation can give whatever its view says, documented once.

Rate limits (429) and an unreachable database (503) apply to every operation and carry Retry-After; request
bodies can be too large (413) or not JSON (415); no operation can answer in a media type the client refuses
(406). Listing these per view would repeat them twenty times and drift."""

from typing import Any

ERROR_REF = {"$ref": "#/components/schemas/Error"}
RETRY_AFTER = {
    "Retry-After": {
        "schema": {"type": "integer", "minimum": 1},
        "description": "Seconds to wait before retrying.",
    }
}
COMMON: dict[str, tuple[str, bool]] = {
    "406": ("The Accept header excludes application/json.", False),
    "429": ("Over the caller's request rate (AGENT_RATE / REVIEWER_RATE).", True),
    "503": ("The database is unreachable for the moment.", True),
}
WITH_BODY: dict[str, tuple[str, bool]] = {
    "400": ("The body is not valid JSON or not the expected shape.", False),
    "413": ("The body is over MAX_BODY_BYTES.", False),
    "415": ("The body is not application/json.", False),
}
AUTHENTICATED: dict[str, tuple[str, bool]] = {"401": ("Missing, invalid or revoked credentials.", False)}


def error_response(description: str, retry_after: bool) -> dict[str, Any]:
    response: dict[str, Any] = {
        "description": description,
        "content": {"application/json": {"schema": ERROR_REF}},
    }
    if retry_after:
        response["headers"] = RETRY_AFTER
    return response


REQUEST_ID = {"request_id": "$response.body#/id"}
# OpenAPI links: which operation's answer names the resource another operation acts on. Clients and stateful
# fuzzers (schemathesis) follow them: create a request, then read, cancel, claim and answer that request.
LINKS: dict[str, dict[str, tuple[str, dict[str, str]]]] = {
    "requests_create": {
        "ReadRequest": ("requests_retrieve", REQUEST_ID),
        "CancelRequest": ("requests_cancel", REQUEST_ID),
        "ReviewRequest": ("review_request_retrieve", REQUEST_ID),
        "ClaimRequest": ("review_request_claim", REQUEST_ID),
        "RenewClaim": ("review_request_heartbeat", REQUEST_ID),
        "ReleaseClaim": ("review_request_release", REQUEST_ID),
        "TakeOverClaim": ("review_request_takeover", REQUEST_ID),
        "SaveDraft": ("review_request_draft", REQUEST_ID),
        "Respond": ("review_request_respond", REQUEST_ID),
    },
    "flows_create": {
        "ReadFlow": ("flows_retrieve_state", {"flow_id": "$response.body#/id"}),
        "RetrieveFlow": ("flows_retrieve", {"flow_id": "$response.body#/id"}),
        "ReviewFlowRequest": ("review_request_retrieve", {"request_id": "$response.body#/requestId"}),
    },
    "review_queues_list": {
        "QueueRequests": ("review_queue_requests", {"slug": "$response.body#/0/slug"}),
        "ClaimNext": ("review_claim_next", {"slug": "$response.body#/0/slug"}),
    },
    "review_claim_next": {
        "RespondToClaimed": ("review_request_respond", REQUEST_ID),
        "ReleaseClaimed": ("review_request_release", REQUEST_ID),
    },
}


def add_links(result: dict[str, Any]) -> None:
    for operations in result.get("paths", {}).values():
        for operation in operations.values():
            if not isinstance(operation, dict):
                continue
            links = LINKS.get(operation.get("operationId", ""))
            if not links:
                continue
            for code in ("200", "201"):
                response = operation.get("responses", {}).get(code)
                if response is not None:
                    response["links"] = {
                        name: {"operationId": target, "parameters": parameters}
                        for name, (target, parameters) in links.items()
                    }


def add_common_responses(
    result: dict[str, Any], generator: Any, request: Any, public: bool
) -> dict[str, Any]:
    add_links(result)
    for path, operations in result.get("paths", {}).items():
        if not path.startswith("/api/v1/"):
            continue
        for method, operation in operations.items():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            responses = operation["responses"]
            extra = dict(COMMON)
            if method in {"post", "put", "patch"}:
                extra |= WITH_BODY
            if operation.get("security"):
                extra |= AUTHENTICATED
            for code, (description, retry_after) in extra.items():
                if code not in responses:
                    responses[code] = error_response(description, retry_after)
                elif retry_after:
                    responses[code].setdefault("headers", RETRY_AFTER)
    return result
