"""Paddock sandboxes as a sandbox provider for the OpenAI Agents SDK (over NATS).

    from paddock_agents import PaddockSandboxClient, PaddockSandboxClientOptions

Paddock's errors are the classes of ``paddock_agents.errors`` (one per error code, all
``PaddockError``); the wire's constants are in ``paddock_agents.contract``.
"""

from .errors import PaddockError, error_for
from .sandbox import (
    PaddockSandboxClient,
    PaddockSandboxClientOptions,
    PaddockSandboxSession,
    PaddockSandboxSessionState,
)
from .transport import Credentials, connect

__all__ = [
    "Credentials",
    "PaddockError",
    "PaddockSandboxClient",
    "PaddockSandboxClientOptions",
    "PaddockSandboxSession",
    "PaddockSandboxSessionState",
    "connect",
    "error_for",
]
