"""A minimal agent: ask a human one question through ReviewHub and print the answer.

    make run                                   # terminal 1: prints AGENT_KEY=rh_...
    REVIEWHUB_AGENT_KEY=rh_... python examples/agent.py   # terminal 2

Then open http://127.0.0.1:8000/ (login reviewer / reviewer), take the question from the "default" queue and
answer it: this script prints the answer the moment you submit. REVIEWHUB_URL points it at another server.
"""

import os
import sys

from reviewhub_client import ReviewHubClient, ReviewHubError, WaitTimeout

QUESTION = "The agent wants to deploy build 1.4.2 to production. Go ahead?"
SCHEMA = {
    "type": "object",
    "properties": {
        "approve": {"type": "boolean", "title": "Approve the deployment?"},
        "window": {
            "type": "string",
            "title": "When",
            "oneOf": [{"const": "now", "title": "Now"}, {"const": "tonight", "title": "Tonight, 22:00"}],
        },
        "note": {"type": "string", "title": "Note for the agent", "maxLength": 500},
    },
    "required": ["approve"],
}


def main() -> int:
    url = os.environ.get("REVIEWHUB_URL", "http://127.0.0.1:8000")
    key = os.environ.get("REVIEWHUB_AGENT_KEY", "")
    if not key:
        print("Set REVIEWHUB_AGENT_KEY to the AGENT_KEY=... line that `make run` prints.", file=sys.stderr)
        return 2
    timeout = float(os.environ.get("REVIEWHUB_WAIT_SECONDS", "600"))
    try:
        with ReviewHubClient(url, key) as hub:
            request = hub.create(
                QUESTION, SCHEMA, queue="default", context={"tool": "deploy", "arguments": {"build": "1.4.2"}}
            )
            print(f"Asked a human: {url}/requests/{request.id}/ — waiting for the answer...", flush=True)
            try:
                result = hub.wait(request.id, timeout=timeout)
            except WaitTimeout:
                hub.cancel(request.id)  # the turn is over: take the question off the reviewers' queue
                print(f"Nobody answered within {timeout:.0f} s; withdrew the question.")
                return 1
    except ReviewHubError as exc:
        print(f"ReviewHub error: {exc}", file=sys.stderr)
        return 1
    print(f"Answer: {result.action}")
    if result.content is not None:
        for name, value in result.content.items():
            print(f"  {name}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
