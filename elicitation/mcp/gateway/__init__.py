"""ReviewHub as an MCP gateway: configured upstream MCP servers at `/mcp/gateway/<name>/`, their tool calls held for
a person's approval where the queue's rules say so (docs/mcp.md, "Gateway").

`config.py`: the upstreams from `MCP_GATEWAY_UPSTREAMS`; `upstreams.py`: one SDK client per upstream, kept open;
`approvals.py`: a held call as a request and its outcome as a result; `server.py`: the SDK server per upstream;
`endpoint.py`: the ASGI routing in front of `/mcp/`."""
