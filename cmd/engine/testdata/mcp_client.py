"""Drive `engine mcp` with the Python `mcp` package's own client.

    python mcp_client.py stdio ENGINE [ARG...]   start ENGINE ARG... (engine mcp) over stdio
    python mcp_client.py http URL TOKEN          connect to engine mcp --http with a bearer token

It lists the tools and calls create, write, read, ls, exec, events and
delete; every result must be a success whose structured content the client
validated against the tool's output schema. It prints one JSON line: the
session it made and the actors of that session's events.
"""

import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamablehttp_client

TOOLS = {"sandbox_create", "sandbox_exec", "sandbox_read", "sandbox_write", "sandbox_ls", "sandbox_fork", "sandbox_events"}


async def call(session, name, args):
    r = await session.call_tool(name, args)
    assert not r.isError, f"{name}: {r.content}"
    assert r.structuredContent is not None, f"{name}: no structured content"
    return r


async def drive(session, transport):
    await session.initialize()
    tools = await session.list_tools()
    names = {t.name for t in tools.tools}
    assert TOOLS <= names, names
    for t in tools.tools:
        assert t.description and t.inputSchema.get("type") == "object" and t.outputSchema, t.name

    sid = (await call(session, "sandbox_create", {"labels": {"via": "python-mcp"}})).structuredContent["session_id"]
    w = await call(session, "sandbox_write", {"session_id": sid, "path": "notes/hi.txt", "content": "hi from " + transport + "\n"})
    assert w.structuredContent["size"] == len("hi from " + transport + "\n"), w.structuredContent
    r = await call(session, "sandbox_read", {"session_id": sid, "path": "notes/hi.txt"})
    assert r.structuredContent["content"] == "hi from " + transport + "\n", r.structuredContent
    ls = await call(session, "sandbox_ls", {"session_id": sid, "path": "notes"})
    assert [e["name"] for e in ls.structuredContent["entries"]] == ["hi.txt"], ls.structuredContent
    ex = await call(session, "sandbox_exec", {"session_id": sid, "argv": ["cat", "notes/hi.txt"]})
    assert ex.structuredContent["exit_code"] == 0 and ex.structuredContent["stdout"] == "hi from " + transport + "\n", ex.structuredContent
    assert "exit code 0" in ex.content[0].text, ex.content
    bad = await session.call_tool("sandbox_read", {"session_id": sid, "path": "missing"})
    assert bad.isError and bad.content[0].text.startswith("not_found: "), bad
    assert bad.structuredContent["error"]["code"] == "not_found", bad.structuredContent
    ev = await call(session, "sandbox_events", {"session_id": sid})
    events = ev.structuredContent["events"]
    ops = [e["op"] for e in events if e["phase"] == "start"]
    for op in ("create", "write", "read", "ls", "exec"):
        assert op in ops, (op, ops)
    actors = sorted({e.get("actor", "") for e in events if e["phase"] == "start"})
    await call(session, "sandbox_delete", {"session_id": sid})
    print(json.dumps({"transport": transport, "session_id": sid, "tools": sorted(names), "actors": actors}), flush=True)


async def main():
    mode = sys.argv[1]
    if mode == "stdio":
        params = StdioServerParameters(command=sys.argv[2], args=sys.argv[3:])
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await drive(session, "stdio")
    elif mode == "http":
        url, token = sys.argv[2], sys.argv[3]
        async with streamablehttp_client(url, headers={"Authorization": "Bearer " + token}) as (read, write, _):
            async with ClientSession(read, write) as session:
                await drive(session, "http")
    else:
        raise SystemExit("mode: stdio or http")


asyncio.run(main())
