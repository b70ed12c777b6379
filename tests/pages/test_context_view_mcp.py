"""The request page's "Who is asking" reads the MCP bridge's `context.mcp` nesting as well as top-level keys."""

from elicitation.reviewer.presenters import context_view


def test_the_bridges_nested_mcp_context_names_server_tool_and_arguments_as_rows() -> None:
    view = context_view(
        {
            "team": "ops",
            "mcp": {
                "server": "deploy-approvals",
                "tool": "deploy",
                "arguments": {"version": "1.4", "targets": ["eu", "us"]},
                "protocolVersion": "2025-11-25",
                "requestId": 7,
            },
        }
    )

    assert (view["server"], view["tool"]) == ("deploy-approvals", "deploy")
    assert view["argument_rows"] == [("version", "1.4"), ("targets", '[\n  "eu",\n  "us"\n]')]
    assert ("team", "ops") in view["other"]
    assert view["other"][0][0] == "mcp" and "requestId" in view["other"][0][1]
    assert "deploy-approvals" not in view["other"][0][1]


def test_top_level_keys_still_win_and_odd_context_is_harmless() -> None:
    assert context_view({"server": "top", "mcp": {"server": "nested"}})["server"] == "top"
    assert context_view({"mcp": "not an object"})["other"] == [("mcp", "not an object")]
    assert context_view(["not", "a", "dict"])["argument_rows"] == []
    assert context_view({"arguments": "plain text"})["argument_rows"] == []
