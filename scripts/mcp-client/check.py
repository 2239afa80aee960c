"""An independent MCP client for `graphsync mcp`: the Python SDK (PyPI `mcp`).

Over stdio (it runs the command it is given) and over streamable HTTP (a URL
and a bearer token), it lists the tools, calls each one, and reads the graph
model resource, checking what comes back. Any failure exits non-zero.

    python check.py --stdio "bin/graphsync mcp --tenant 7" \
        --http http://127.0.0.1:8765/mcp --token gsmcp_... \
        --question kettle --expect-key Product:15

Run by mcpserver's TestPythonClient (make test), which sets the graph up.
"""

import argparse
import asyncio
import json
import os
import shlex
import sys

import httpx2
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

MODEL_URI = "graphsync://graph-model"
TOOLS = {"graph_context", "graph_lookup", "graph_status"}

passed = 0
failed = 0


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
        print(f"ok   {what}")
    else:
        failed += 1
        print(f"FAIL {what}")


def text_of(result):
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


async def exercise(session, transport, args):
    await session.initialize()
    tools = await session.list_tools()
    names = {t.name for t in tools.tools}
    check(names == TOOLS, f"{transport}: tools are {sorted(names)}")
    for tool in tools.tools:
        schema = json.dumps(tool.input_schema)
        check("tenant" not in schema.lower(), f"{transport}: {tool.name}'s schema takes no tenant")

    res = await session.call_tool("graph_context", {"question": args.question, "top_k": 3, "hops": 2, "max_chars": 2000})
    text = text_of(res)
    check(not res.is_error and args.expect_key in text, f"{transport}: graph_context cites {args.expect_key}")
    structured = res.structured_content or {}
    check(args.expect_key in structured.get("node_keys", []), f"{transport}: graph_context's structured node_keys hold {args.expect_key}")

    res = await session.call_tool("graph_lookup", {"key": args.expect_key})
    check(not res.is_error and args.expect_key in text_of(res), f"{transport}: graph_lookup {args.expect_key}")
    res = await session.call_tool("graph_lookup", {"key": "Product:1"})
    check(res.is_error and "not found" in text_of(res), f"{transport}: graph_lookup of a missing key is not found")

    res = await session.call_tool("graph_status", {})
    structured = res.structured_content or {}
    check(not res.is_error and "pending_events" in structured, f"{transport}: graph_status reports pending_events")

    res = await session.call_tool("graph_context", {"question": "x" * 5000})
    check(res.is_error, f"{transport}: a question over the limit is a tool error")

    resources = await session.list_resources()
    check(any(str(r.uri) == MODEL_URI for r in resources.resources), f"{transport}: lists {MODEL_URI}")
    model = await session.read_resource(MODEL_URI)
    body = "".join(getattr(c, "text", "") for c in model.contents)
    check("# The graph model" in body and "Product" in body, f"{transport}: reads the graph model")


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--stdio", required=True, help="the server command line")
    parser.add_argument("--http", required=True, help="the /mcp URL")
    parser.add_argument("--token", required=True)
    parser.add_argument("--question", required=True)
    parser.add_argument("--expect-key", required=True)
    args = parser.parse_args()

    argv = shlex.split(args.stdio)
    # The SDK passes the server a minimal environment; the connection
    # settings (GRAPHSYNC_*) are passed on.
    env = {k: v for k, v in os.environ.items() if k.startswith("GRAPHSYNC_")}
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=env)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await exercise(session, "stdio", args)

    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {args.token}"}, timeout=60) as client:
        async with streamable_http_client(args.http, http_client=client) as streams:
            async with ClientSession(streams[0], streams[1]) as session:
                await exercise(session, "http", args)

    async with httpx2.AsyncClient(timeout=10) as client:
        resp = await client.post(args.http, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                                 headers={"Accept": "application/json, text/event-stream"})
        check(resp.status_code == 401 and resp.headers.get("www-authenticate", "").startswith("Bearer"),
              f"http: no token is 401 with a Bearer challenge (got {resp.status_code})")

    print(f"python mcp client: {passed} passed, {failed} failed")
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
