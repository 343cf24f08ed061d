"""The package's tests run against a real Paddock engine (Docker runtime, Python image).

The Go test cmd/engine TestPythonProvider starts one and sets PADDOCK_URL, PADDOCK_CREDS (a client
credential), PADDOCK_ADMIN_CREDS, PADDOCK_IMAGE, PADDOCK_RUNTIME and PADDOCK_ENGINE (the engine
binary, for `engine events export`). Without them the tests skip, unless CI=true: then they fail.
"""

from __future__ import annotations

import os

import pytest

from paddock_agents import PaddockSandboxClient, PaddockSandboxClientOptions

REQUIRED = ("PADDOCK_URL", "PADDOCK_CREDS", "PADDOCK_IMAGE")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    missing = [k for k in REQUIRED if not os.environ.get(k)]
    if not missing:
        return
    why = f"no Paddock engine to test against: {', '.join(missing)} unset (go test ./cmd/engine -run TestPythonProvider starts one)"
    if os.environ.get("CI") == "true":
        raise pytest.UsageError(why + " (CI=true: these tests must run)")
    # Tests that need no engine (test_nkeys.py) run all the same.
    for item in items:
        if {"options", "client"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.skip(reason=why))


@pytest.fixture
def options() -> PaddockSandboxClientOptions:
    """The sandbox's options (the connection comes from PADDOCK_URL, PADDOCK_CREDS)."""
    return PaddockSandboxClientOptions(image=os.environ.get("PADDOCK_IMAGE"), runtime=os.environ.get("PADDOCK_RUNTIME") or "docker")


@pytest.fixture
async def client(options: PaddockSandboxClientOptions):  # type: ignore[no-untyped-def]
    c = PaddockSandboxClient(options)
    yield c
    await c.aclose()
