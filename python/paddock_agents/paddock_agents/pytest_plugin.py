"""pytest plugin: runs the OpenAI Agents SDK's own sandbox tests against Paddock.

    pytest -p paddock_agents.pytest_plugin tests/sandbox/test_run_cwd.py

It rebinds the SDK's ``UnixLocalSandboxClient`` (in ``agents.sandbox.sandboxes.unix_local``,
before the test modules import it) to a Paddock client configured from the environment:
PADDOCK_URL, PADDOCK_CREDS, PADDOCK_IMAGE, PADDOCK_RUNTIME. The SDK's files stay unmodified.

One adaptation, for test_run_cwd.py's Python skill test: it runs ``sys.executable`` (the host's
interpreter path) inside the sandbox. For the tests of modules named in PADDOCK_SANDBOX_PYTHON_TESTS
(default: test_run_cwd) ``sys.executable`` is the sandbox image's ``python3`` while the test runs.
"""

from __future__ import annotations

import os
import sys

import pytest

from .sandbox import PaddockSandboxClient, PaddockSandboxClientOptions


def options_from_env() -> PaddockSandboxClientOptions:
    """Client options from PADDOCK_URL, PADDOCK_CREDS, PADDOCK_TENANT, PADDOCK_IMAGE, PADDOCK_RUNTIME."""
    return PaddockSandboxClientOptions(
        url=os.environ.get("PADDOCK_URL"),
        creds=os.environ.get("PADDOCK_CREDS"),
        tenant=os.environ.get("PADDOCK_TENANT") or None,
        image=os.environ.get("PADDOCK_IMAGE") or None,
        runtime=os.environ.get("PADDOCK_RUNTIME") or None,
    )


class EnvPaddockSandboxClient(PaddockSandboxClient):
    """A PaddockSandboxClient that, like UnixLocalSandboxClient, needs no arguments."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(options_from_env(), **kwargs)  # type: ignore[arg-type]


def pytest_configure(config: pytest.Config) -> None:
    from agents.sandbox.sandboxes import unix_local

    unix_local.UnixLocalSandboxClient = EnvPaddockSandboxClient  # type: ignore[misc,assignment]


@pytest.fixture(autouse=True)
def _paddock_sandbox_python(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    names = os.environ.get("PADDOCK_SANDBOX_PYTHON_TESTS", "test_run_cwd").split(",")
    module = getattr(request.module, "__name__", "").rsplit(".", 1)[-1]
    if module in names:
        monkeypatch.setattr(sys, "executable", "python3")
