"""Paddock sandboxes as a sandbox provider for the OpenAI Agents SDK (over NATS).

    from paddock_agents import PaddockSandboxClient, PaddockSandboxClientOptions
"""

from .sandbox import (
    PaddockSandboxClient,
    PaddockSandboxClientOptions,
    PaddockSandboxSession,
    PaddockSandboxSessionState,
)
from .transport import Credentials, PaddockError, connect

__all__ = [
    "Credentials",
    "PaddockError",
    "PaddockSandboxClient",
    "PaddockSandboxClientOptions",
    "PaddockSandboxSession",
    "PaddockSandboxSessionState",
    "connect",
]
