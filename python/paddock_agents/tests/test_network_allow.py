"""network_allow: the sandbox reaches only what its list holds, through its node's egress proxy;
Python's urllib in the sandbox uses the proxy by itself (HTTP_PROXY), and a destination off the
list is refused with a 403 that says why."""

from __future__ import annotations

import base64

from agents.sandbox import Manifest

from paddock_agents import PaddockSandboxClient, PaddockSandboxClientOptions

PROBE = """
import urllib.error, urllib.request
try:
    urllib.request.urlopen("http://elsewhere.test/", timeout=10)
    print("reached")
except urllib.error.HTTPError as e:
    print("refused", e.code, e.read().decode().strip())
"""


async def test_network_allow_refuses_what_the_list_does_not_hold(options: PaddockSandboxClientOptions) -> None:
    client = PaddockSandboxClient(options.model_copy(update={"network_allow": ("pypi.org:443",)}))
    session = await client.create(manifest=Manifest())
    try:
        async with session:
            script = base64.b64encode(PROBE.encode()).decode()
            result = await session.exec(f"echo {script} | base64 -d | python3")
            out = result.stdout.decode() if isinstance(result.stdout, bytes) else str(result.stdout)
            assert out.startswith("refused 403"), out
            assert "elsewhere.test" in out, out
    finally:
        await client.delete(session)
