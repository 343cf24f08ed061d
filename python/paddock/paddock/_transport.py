"""Paddock's wire contract over nats.py: the request envelope, replies, errors and retries.

Requests go through nats.py's ``request``, which answers every request of a connection on one
wildcard reply subscription (a mux of futures), not an inbox subscription per request.

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
import ssl
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import nats
from nats.aio.client import Client as _NatsClient
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

from ._nkeys import NkeyError, UserKey, ensure_nkeys_module
from ._trace import Trace, trace_headers
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

_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, check_circular=False).encode

# The client's own timing (client/client.go), not the contract's.
NO_RESPONDER_GRACE = 1.0
LIVENESS_CHECK = 2.0
DEFAULT_TIMEOUT = 60.0
WORKSPACE_TIMEOUT = 30 * 60.0


@dataclass(frozen=True)
class Credentials:
    """Paddock credentials: a JSON credentials file (``engine serve`` writes them under
    <state-dir>/auth/creds/, ``engine auth add`` prints them) or an nkey seed file (``*.nk``: one
    ``SU...`` seed line, ``engine auth creds NAME --format nkey``), which names no tenant."""

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
                text = f.read()
        except FileNotFoundError as e:
            raise InvalidRequest(f"no credentials file {path}") from e
        except (OSError, ValueError) as e:
            raise InvalidRequest(f"cannot read the credentials file {path}") from e
        lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith(("#", "//"))]
        if len(lines) == 1 and lines[0].startswith("SU"):
            return cls.from_seed(lines[0], source=path)
        try:
            raw = json.loads(text)
        except ValueError as e:
            raise InvalidRequest(f"{path} is neither a Paddock credentials file nor an nkey seed file") from e
        if not isinstance(raw, dict) or raw.get("paddock_creds") != 1:
            got = raw.get("paddock_creds") if isinstance(raw, dict) else None
            raise InvalidRequest(f"{path}: credentials format {got}, want 1")
        try:
            key = UserKey(str(raw.get("seed", "")))
        except NkeyError as e:
            raise InvalidRequest(f"{path}: {e}") from e
        creds = cls(
            name=str(raw.get("name", "")),
            role=str(raw.get("role", "")),
            tenant=str(raw.get("tenant", "")),
            public_key=str(raw.get("public_key", "")),
            seed=str(raw.get("seed", "")),
            inbox_prefix=str(raw.get("inbox_prefix") or "_INBOX." + str(raw.get("public_key", ""))),
        )
        if key.public_key != creds.public_key:
            raise InvalidRequest(f"{path}: the seed is not the identity's key")
        return creds

    @classmethod
    def from_seed(cls, seed: str, *, source: str = "seed") -> Credentials:
        """Credentials of a bare nkey user seed: no name, role or tenant; the inbox prefix is
        Paddock's for the key (``_INBOX.<public key>``)."""
        try:
            key = UserKey(seed.strip())
        except NkeyError as e:
            raise InvalidRequest(f"{source}: {e}") from e
        return cls(name="", role="", tenant="", public_key=key.public_key, seed=seed.strip(),
                   inbox_prefix="_INBOX." + key.public_key)


def _tls_context(ca: str) -> ssl.SSLContext:
    try:
        return ssl.create_default_context(cafile=ca)
    except (OSError, ssl.SSLError) as e:
        raise InvalidRequest(f"cannot use {ca} as the TLS CA: {e}") from e


async def connect_nats(
    url: str | None = None,
    creds: str | None = None,
    *,
    tls_ca: str | None = None,
    name: str = "paddock-python",
) -> tuple[_NatsClient, Credentials | None]:
    """Connect nats.py to a Paddock deployment (public nats.py API only).

    ``url`` falls back to $PADDOCK_URL, then nats://127.0.0.1:4222; ``creds`` (a credentials or
    nkey seed file) to $PADDOCK_CREDS, and ``"none"`` connects without credentials; ``tls_ca`` (a
    PEM CA file) to $PADDOCK_TLS_CA. Raises PaddockError: ``permission_denied`` when the server
    refuses the credentials, ``unavailable`` when it cannot be reached, ``invalid_request`` for a
    malformed credentials or CA file.
    """
    url = url or os.environ.get("PADDOCK_URL") or "nats://127.0.0.1:4222"
    creds_path = creds or os.environ.get("PADDOCK_CREDS") or "none"
    tls_ca = tls_ca or os.environ.get("PADDOCK_TLS_CA") or None
    loaded = None if creds_path == "none" else Credentials.load(creds_path)
    nc = _NatsClient()
    opts: dict[str, Any] = {
        "servers": url.split(","),
        "name": name,
        "connect_timeout": 5,
        # The first connect fails fast (a refusal must not be retried forever); reconnecting is
        # switched on once connected.
        "allow_reconnect": False,
    }
    if loaded is not None:
        ensure_nkeys_module()  # nats.py signs with the nkeys package (nats-py[nkeys])
        opts["nkeys_seed_str"] = loaded.seed
        opts["inbox_prefix"] = loaded.inbox_prefix
    if tls_ca:
        opts["tls"] = _tls_context(tls_ca)
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
        raise Unavailable(f"cannot reach Paddock at {url}: {e or type(e).__name__}") from e
    # Reconnect from here on: a server restart must not end a long-lived fleet's connection.
    # (nc.options is nats.py's public options dict, read at each reconnect.)
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
        trace: Trace | None = None,
        fallback_no_responders: bool = False,
    ) -> Any:
        """Send one request and return its result; raises PaddockError, of its code's class (errors.py).

        With ``fallback_no_responders`` a request that finds no responder raises NoRespondersError
        itself (for resume's fallback to the scheduler) instead of asking lookup.
        """
        env: dict[str, Any] = {"version": CONTRACT_VERSION, "command_id": command_id or uuid.uuid4().hex}
        if trace is not None:
            if trace.trace_id:
                env["trace_id"] = trace.trace_id
            if trace.parent_span_id:
                env["parent_span_id"] = trace.parent_span_id
        if self.actor:
            env["actor"] = self.actor
        if args is not None:
            env["args"] = args
        body = _dumps(env).encode()
        if len(body) > MAX_REQUEST_BYTES:
            raise PayloadTooLarge(f"request of {len(body)} bytes exceeds {MAX_REQUEST_BYTES}")
        headers = trace_headers(trace)
        deadline = time.monotonic() + timeout
        for moved in range(3):
            try:
                msg = await self._send_watched(subject, body, headers, deadline, session)
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
        raise AssertionError("unreachable")

    async def _send_watched(
        self, subject: str, body: bytes, headers: dict[str, str] | None, deadline: float, session: str
    ) -> Any:
        """_send, and for a session command still waiting after LIVENESS_CHECK, a lookup every
        LIVENESS_CHECK: it ends as ``unavailable`` once the session's node is declared lost. A
        command answered sooner (nearly all) costs one timer, no task."""
        if not session:
            return await self._send(subject, body, headers, deadline)
        task = asyncio.current_task()
        assert task is not None
        lost: list[PaddockError] = []
        watcher: asyncio.Task[None] | None = None

        def watch() -> None:
            nonlocal watcher
            watcher = asyncio.ensure_future(self._watch(session, task, lost))

        handle = asyncio.get_running_loop().call_later(LIVENESS_CHECK, watch)
        try:
            return await self._send(subject, body, headers, deadline)
        except asyncio.CancelledError:
            if not lost:
                raise
            if hasattr(task, "uncancel"):  # 3.11+: this cancel was ours, not the caller's
                task.uncancel()
            raise lost[0] from None
        finally:
            # Owned by this call: nothing outlives it, also when the caller cancels it.
            handle.cancel()
            if watcher is not None:
                watcher.cancel()

    async def _watch(self, session: str, task: asyncio.Task[Any], lost: list[PaddockError]) -> None:
        while True:
            err = await self._node_lost(session)
            if err is not None:
                lost.append(err)
                task.cancel()
                return
            await asyncio.sleep(LIVENESS_CHECK)

    async def _send(self, subject: str, body: bytes, headers: dict[str, str] | None, deadline: float) -> Any:
        give_up = time.monotonic() + NO_RESPONDER_GRACE
        wait = 0.005
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise NatsTimeoutError
            try:
                return await self.nc.request(subject, body, timeout=left, headers=headers)
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

    async def _node_lost(self, session: str) -> PaddockError | None:
        """Unavailable when the engine says the session's node was declared lost, else None."""
        try:
            res = await self.lookup(session, timeout=LIVENESS_CHECK)
        except PaddockError:
            return None
        if res.get("status") == STATUS_LOST:
            return Unavailable(
                f"session {session}: its node {res.get('node')} was declared lost while the command ran; "
                "the outcome is unknown. Resume the session, then send the command again",
            )
        return None

    # --- the transfer service (client/transfer.go) ---

    async def upload(self, chunks: Iterable[bytes]) -> tuple[str, int]:
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
