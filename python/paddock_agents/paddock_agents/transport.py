"""Paddock's wire contract over nats.py: the request envelope, replies, errors and retries.

This mirrors the Go reference client (client/client.go, client/transfer.go in the Paddock
repository): a request that finds no responder is sent again for up to NO_RESPONDER_GRACE; a
session command that finds none asks the engine (lookup) why and reports ``unavailable``; a reply
``session_moved`` is sent again (twice at most); a session command that waits asks lookup every
LIVENESS_CHECK seconds and ends as ``unavailable`` when the session's node was declared lost.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import nats
from nats.aio.client import Client as _NatsClient
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

from ._nkeys import UserKey
from .contract import (
    CONTRACT_VERSION,
    MAX_REQUEST_BYTES,
    OP_LOOKUP,
    SESSION_SUBJECT,
    STATUS_LOST,
    SUBJECT_PREFIX,
    TENANT_SUBJECTS,
    TRANSFER_CHUNK_BYTES,
)
from .errors import (
    Internal,
    InvalidRequest,
    PaddockError,
    PayloadTooLarge,
    PermissionDenied,
    SessionMoved,
    SessionNotFound,
    Unavailable,
    error_for,
)

# The client's own timing (client/client.go), not the contract's.
NO_RESPONDER_GRACE = 1.0
LIVENESS_CHECK = 2.0
DEFAULT_TIMEOUT = 60.0
WORKSPACE_TIMEOUT = 30 * 60.0


@dataclass(frozen=True)
class Credentials:
    """A Paddock credentials file (``engine serve`` writes them under <state-dir>/auth/creds/)."""

    name: str
    role: str
    tenant: str
    public_key: str
    seed: str
    inbox_prefix: str

    @classmethod
    def load(cls, path: str) -> Credentials:
        """Read and check a credentials file; raises InvalidRequest (a PaddockError) when malformed."""
        try:
            with open(path, encoding="utf-8") as f:
                raw = json.load(f)
        except FileNotFoundError as e:
            raise InvalidRequest(f"no credentials file {path}") from e
        except (OSError, ValueError) as e:
            raise InvalidRequest(f"{path} is not a Paddock credentials file") from e
        if raw.get("paddock_creds") != 1:
            raise InvalidRequest(f"{path}: credentials format {raw.get('paddock_creds')}, want 1")
        creds = cls(
            name=str(raw.get("name", "")),
            role=str(raw.get("role", "")),
            tenant=str(raw.get("tenant", "")),
            public_key=str(raw.get("public_key", "")),
            seed=str(raw.get("seed", "")),
            inbox_prefix=str(raw.get("inbox_prefix") or "_INBOX." + str(raw.get("public_key", ""))),
        )
        if UserKey(creds.seed).public_key != creds.public_key:
            raise InvalidRequest(f"{path}: the seed is not the identity's key")
        return creds


class _NkeyClient(_NatsClient):
    """nats.py's client, signing the nonce with our own nkey code instead of the nkeys package."""

    _paddock_key: UserKey | None = None

    def _setup_nkeys_connect(self) -> None:  # called by connect() when nkeys_seed_str is set
        key = self._paddock_key
        assert key is not None
        self._public_nkey = key.public_key

        def sign(nonce: str) -> bytes:
            return base64.b64encode(key.sign(nonce.encode()))

        self._signature_cb = sign


async def connect(
    url: str | None = None,
    creds: str | None = None,
    *,
    name: str = "paddock-agents",
) -> tuple[_NatsClient, Credentials | None]:
    """Connect to a Paddock deployment.

    ``url`` falls back to $PADDOCK_URL, then nats://127.0.0.1:4222; ``creds`` (a credentials file
    path) to $PADDOCK_CREDS, and ``"none"`` connects without credentials. Raises PaddockError:
    ``permission_denied`` when the server refuses the credentials, ``unavailable`` when it cannot
    be reached.
    """
    url = url or os.environ.get("PADDOCK_URL") or "nats://127.0.0.1:4222"
    creds_path = creds or os.environ.get("PADDOCK_CREDS") or "none"
    loaded = None if creds_path == "none" else Credentials.load(creds_path)
    nc = _NkeyClient()
    opts: dict[str, Any] = {
        "servers": url.split(","),
        "name": name,
        "connect_timeout": 5,
        # The first connect fails fast (a refusal must not be retried forever); reconnecting is
        # switched on once connected.
        "allow_reconnect": False,
    }
    if loaded is not None:
        nc._paddock_key = UserKey(loaded.seed)
        opts["nkeys_seed_str"] = loaded.seed  # only makes nats.py call _setup_nkeys_connect
        opts["inbox_prefix"] = loaded.inbox_prefix
    errors: list[BaseException] = []

    async def on_error(e: BaseException) -> None:
        errors.append(e)

    opts["error_cb"] = on_error
    try:
        await nc.connect(**opts)
    except Exception as e:
        text = " ".join(str(x) for x in [e, *errors]).lower()
        if "authorization" in text or "authentication" in text:
            raise PermissionDenied(f"{url} refused the credentials {creds_path}") from e
        raise Unavailable(f"cannot reach Paddock at {url}") from e
    # Reconnect from here on: a server restart must not end a long-lived fleet's connection.
    nc.options["max_reconnect_attempts"] = -1
    nc.options["allow_reconnect"] = True
    return nc, loaded


class Transport:
    """Sends Paddock commands for one tenant on a connected nats.py client."""

    def __init__(self, nc: _NatsClient, tenant: str, *, prefix: str = SUBJECT_PREFIX, actor: str = "") -> None:
        self.nc = nc
        self.tenant = tenant
        self.prefix = prefix
        self.actor = actor

    def tenant_subject(self, op: str) -> str:
        """The tenant's subject of ``op``: create, lookup, resume, delete, fork, upload or download."""
        return TENANT_SUBJECTS[op].format(prefix=self.prefix, tenant=self.tenant)

    def session_subject(self, session: str, op: str) -> str:
        """The subject of ``op`` on one session."""
        return SESSION_SUBJECT.format(prefix=self.prefix, tenant=self.tenant, session=session, op=op)

    async def request(
        self,
        subject: str,
        args: Any = None,
        *,
        session: str = "",
        timeout: float = DEFAULT_TIMEOUT,
        command_id: str | None = None,
        trace: tuple[str | None, str | None] = (None, None),
        fallback_no_responders: bool = False,
    ) -> Any:
        """Send one request and return its result; raises PaddockError, of its code's class (errors.py).

        With ``fallback_no_responders`` a request that finds no responder raises NoRespondersError
        itself (for resume's fallback to the scheduler) instead of asking lookup.
        """
        env: dict[str, Any] = {"version": CONTRACT_VERSION, "command_id": command_id or str(uuid.uuid4())}
        if trace[0]:
            env["trace_id"] = trace[0]
        if trace[1]:
            env["parent_span_id"] = trace[1]
        if self.actor:
            env["actor"] = self.actor
        if args is not None:
            env["args"] = args
        body = json.dumps(env, separators=(",", ":")).encode()
        if len(body) > MAX_REQUEST_BYTES:
            raise PayloadTooLarge(f"request of {len(body)} bytes exceeds {MAX_REQUEST_BYTES}")
        deadline = time.monotonic() + timeout
        watch = None
        send: asyncio.Future[Any] | None = None
        if session:
            watch = asyncio.ensure_future(self._watch_node(session))
        try:
            for moved in range(3):
                send = asyncio.ensure_future(self._send(subject, body, deadline))
                waiters = {send} if watch is None else {send, watch}
                done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
                if send not in done:
                    send.cancel()
                    raise watch.result()  # type: ignore[union-attr]
                try:
                    msg = send.result()
                except NoRespondersError:
                    if fallback_no_responders:
                        raise
                    raise await self._no_responders(subject, session) from None
                except (NatsTimeoutError, asyncio.TimeoutError):
                    raise Unavailable(f"no reply on {subject} in time") from None
                except nats.errors.Error as e:  # connection closed, draining, ...
                    raise Unavailable(f"request {subject}: {type(e).__name__}") from e
                try:
                    rep = json.loads(msg.data)
                except ValueError as e:
                    raise Internal(f"a reply on {subject} is not JSON") from e
                err = rep.get("error")
                if err and err.get("code") == SessionMoved.code and moved < 2:
                    continue
                if err:
                    raise error_for(err.get("code", Internal.code), err.get("message", ""), err.get("retryable"))
                return rep.get("result") or {}
        finally:
            # Owned by this call: nothing outlives it, also when the caller cancels it.
            if send is not None and not send.done():
                send.cancel()
            if watch is not None:
                watch.cancel()
        raise AssertionError("unreachable")

    async def _send(self, subject: str, body: bytes, deadline: float) -> Any:
        give_up = time.monotonic() + NO_RESPONDER_GRACE
        wait = 0.005
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise NatsTimeoutError
            try:
                return await self.nc.request(subject, body, timeout=left)
            except NoRespondersError:
                # Nothing received it, so sending it again is safe; a responder can be missing
                # for a moment while the server reloads its accounts or a node restarts.
                if time.monotonic() + wait > give_up:
                    raise
                await asyncio.sleep(wait)
                wait = min(2 * wait, 0.2)

    async def lookup(self, session: str, timeout: float = 10.0) -> dict[str, Any]:
        """The engine's view of a session: {"status", "node"}; raises SessionNotFound."""
        return await self.request(self.tenant_subject(OP_LOOKUP), {"session_id": session}, timeout=timeout)

    async def _no_responders(self, subject: str, session: str) -> PaddockError:
        if not session:
            return Unavailable(f"no engine serves {subject}")
        try:
            res = await self.lookup(session)
        except PaddockError as e:
            if isinstance(e, SessionNotFound):
                return e
            return Unavailable(f"session {session} does not answer")
        if res.get("status") == STATUS_LOST:
            return Unavailable(
                f"session {session} was lost with node {res.get('node')}; resume it, then send the command again",
            )
        return Unavailable(
            f"session {session} ({res.get('status')}) is on node {res.get('node')}, which does not answer"
        )

    async def _watch_node(self, session: str) -> PaddockError:
        """Returns (never raises) once the engine says the session's node is lost."""
        while True:
            await asyncio.sleep(LIVENESS_CHECK)
            try:
                res = await self.lookup(session, timeout=LIVENESS_CHECK)
            except PaddockError:
                continue
            if res.get("status") == STATUS_LOST:
                return Unavailable(
                    f"session {session}: its node {res.get('node')} was declared lost while the command ran; "
                    "the outcome is unknown. Resume the session, then send the command again",
                )

    # --- the transfer service (client/transfer.go) ---

    async def upload(self, chunks: AsyncIterator[bytes] | Any) -> tuple[str, int]:
        """Upload a stream (an iterable of byte chunks) to a temporary object; returns (name, size)."""
        opened = await self.request(self.tenant_subject("upload"), {})
        size = max(1, min(int(opened.get("chunk_bytes") or TRANSFER_CHUNK_BYTES), TRANSFER_CHUNK_BYTES))
        subject = opened["subject"]
        off = 0
        pending = b""
        it = iter(chunks)
        eof = False
        while True:
            while not eof and len(pending) <= size:
                try:
                    pending += next(it)
                except StopIteration:
                    eof = True
            data, pending = pending[:size], pending[size:]
            last = eof and not pending
            args: dict[str, Any] = {"offset": off, "last": last}
            if data:
                args["data"] = base64.b64encode(data).decode()
            p = await self.request(subject, args)
            off += len(data)
            if int(p.get("received", -1)) != off:
                raise Unavailable(f"upload: the engine has {p.get('received')} bytes, {off} were sent")
            if last:
                return p["upload"], off

    async def download(self, name: str, sink: Any) -> int:
        """Stream the object ``name`` (a read's ``download``) into ``sink.write``; returns its size."""
        opened = await self.request(self.tenant_subject("download"), {"name": name})
        off = 0
        while True:
            d = await self.request(opened["subject"], {"offset": off})
            data = base64.b64decode(d.get("data") or "")
            sink.write(data)
            off += len(data)
            if d.get("last"):
                return off

    async def discard(self, name: str) -> None:
        """Delete an upload the client no longer needs (best effort)."""
        try:
            await self.request(self.tenant_subject("upload"), {"discard": name}, timeout=10)
        except PaddockError:
            pass
