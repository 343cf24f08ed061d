"""pytest plugin: runs the OpenAI Agents SDK's own sandbox tests against Paddock.

    pytest -p paddock_agents.pytest_plugin tests/sandbox/test_run_cwd.py tests/sandbox/test_exposed_ports.py

It rebinds the SDK's ``UnixLocalSandboxClient`` and ``UnixLocalSandboxClientOptions`` (in
``agents.sandbox.sandboxes.unix_local`` and ``agents.sandbox.sandboxes``, before the test modules
import them) to ``PaddockSandboxClient`` and ``PaddockSandboxClientOptions`` themselves: the
client, constructed with no arguments as the tests do, takes everything from the environment
(PADDOCK_URL, PADDOCK_CREDS, PADDOCK_TENANT, PADDOCK_TLS_CA, PADDOCK_IMAGE, PADDOCK_RUNTIME).
The SDK's files stay unmodified.

One adaptation, for test_run_cwd.py's Python skill test: it runs ``sys.executable`` (the host's
interpreter path) inside the sandbox. For the tests of modules named in PADDOCK_SANDBOX_PYTHON_TESTS
(default: test_run_cwd) ``sys.executable`` is the sandbox image's ``python3`` while the test runs.
"""

from __future__ import annotations

import os
import sys

import pytest

from .sandbox import PaddockSandboxClient, PaddockSandboxClientOptions


def pytest_configure(config: pytest.Config) -> None:
    from agents.sandbox import sandboxes
    from agents.sandbox.sandboxes import unix_local

    for mod in (unix_local, sandboxes):
        mod.UnixLocalSandboxClient = PaddockSandboxClient  # type: ignore[misc,assignment,attr-defined]
        mod.UnixLocalSandboxClientOptions = PaddockSandboxClientOptions  # type: ignore[misc,assignment,attr-defined]


@pytest.fixture(autouse=True)
def _paddock_sandbox_python(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    names = os.environ.get("PADDOCK_SANDBOX_PYTHON_TESTS", "test_run_cwd").split(",")
    module = getattr(request.module, "__name__", "").rsplit(".", 1)[-1]
    if module in names:
        monkeypatch.setattr(sys, "executable", "python3")
