"""Exposed ports: an HTTP server started in a sandbox that has no network is reached through the
address resolve_exposed_port returns (Paddock's port op: a forward on the session's node); a port
the options did not expose is refused by the SDK itself."""

from __future__ import annotations

import asyncio
import time
import urllib.request

import pytest
from agents.sandbox import Manifest
from agents.sandbox.errors import ExposedPortUnavailableError

from paddock_agents import PaddockSandboxClient, PaddockSandboxClientOptions


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as res:  # noqa: S310 (a test server on this host)
        return res.read()


async def test_exposed_port_reaches_a_server_in_the_sandbox(options: PaddockSandboxClientOptions) -> None:
    client = PaddockSandboxClient(options.model_copy(update={"exposed_ports": (8080,)}))
    session = await client.create(manifest=Manifest())
    try:
        async with session:
            await session.exec("mkdir -p www && echo hello from paddock > www/index.html")
            # A process that outlives the call (Paddock's proc_start), as an agent runs a dev server.
            await session.pty_exec_start("cd www && exec python3 -m http.server 8080 --bind 127.0.0.1", yield_time_s=0.1)
            endpoint = await session.resolve_exposed_port(8080)
            assert endpoint.host == "127.0.0.1" and endpoint.port > 0, endpoint
            url = endpoint.url_for("http")
            deadline = time.monotonic() + 30
            while True:  # the server may still be starting
                try:
                    body = await asyncio.to_thread(_get, url)
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.2)
            assert body == b"hello from paddock\n"
            with pytest.raises(ExposedPortUnavailableError):
                await session.resolve_exposed_port(9090)
    finally:
        await client.delete(session)
