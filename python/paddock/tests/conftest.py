"""The client's tests run against a real Paddock engine (Docker runtime, Python image).

The Go test cmd/engine TestPythonClient starts one and sets PADDOCK_URL, PADDOCK_CREDS (a client
credential), PADDOCK_ADMIN_CREDS and PADDOCK_IMAGE. Without them the tests that need an engine
skip, unless CI=true: then they fail.
"""

from __future__ import annotations

import os

import pytest

import paddock

REQUIRED = ("PADDOCK_URL", "PADDOCK_CREDS", "PADDOCK_IMAGE")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    missing = [k for k in REQUIRED if not os.environ.get(k)]
    if not missing:
        return
    why = f"no Paddock engine to test against: {', '.join(missing)} unset (go test ./cmd/engine -run TestPythonClient starts one)"
    if os.environ.get("CI") == "true":
        raise pytest.UsageError(why + " (CI=true: these tests must run)")
    for item in items:
        if {"client", "sess", "engine"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.skip(reason=why))


@pytest.fixture
def engine() -> dict[str, str]:
    """The engine's environment."""
    return {k: os.environ.get(k, "") for k in (*REQUIRED, "PADDOCK_ADMIN_CREDS")}


@pytest.fixture
async def client(engine: dict[str, str]):  # type: ignore[no-untyped-def]
    c = await paddock.connect()
    yield c
    await c.close()


@pytest.fixture
async def sess(client: paddock.Client):  # type: ignore[no-untyped-def]
    s = await client.create(image=os.environ["PADDOCK_IMAGE"])
    yield s
    try:
        await s.delete()
    except paddock.errors.SessionNotFound:
        pass
