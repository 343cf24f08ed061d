"""paddock: a plain asyncio Python client for Paddock sandboxes (over NATS).

    import paddock

    async with await paddock.connect() as client:
        sess = await client.create(image="paddock/sandbox-python:test")
        print((await sess.exec(["python3", "-c", "print(6*7)"])).stdout)
        await sess.delete()

Errors are the classes of :mod:`paddock.errors` (one per Paddock error code, all
:class:`PaddockError`); the wire's constants are in :mod:`paddock.contract`.
"""

from ._trace import Trace
from ._transport import Credentials, Transport, connect_nats
from .client import Client, Endpoint, Entry, ExecResult, Process, ProcOutput, Session, connect
from .errors import PaddockError, error_for

__all__ = [
    "Client",
    "Credentials",
    "Endpoint",
    "Entry",
    "ExecResult",
    "PaddockError",
    "ProcOutput",
    "Process",
    "Session",
    "Trace",
    "Transport",
    "connect",
    "connect_nats",
    "error_for",
]
