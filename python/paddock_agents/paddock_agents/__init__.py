"""Paddock sandboxes as a sandbox provider for the OpenAI Agents SDK (over NATS), built on the
plain client ``paddock``.

    from paddock_agents import PaddockSandboxClient, PaddockSandboxClientOptions

Paddock's errors are the classes of ``paddock.errors`` (one per error code, all
``PaddockError``); the wire's constants are in ``paddock.contract``.
"""

from paddock.errors import PaddockError, error_for

from .sandbox import (
    PaddockSandboxClient,
    PaddockSandboxClientOptions,
    PaddockSandboxSession,
    PaddockSandboxSessionState,
)

__all__ = [
    "PaddockError",
    "PaddockSandboxClient",
    "PaddockSandboxClientOptions",
    "PaddockSandboxSession",
    "PaddockSandboxSessionState",
    "error_for",
]
