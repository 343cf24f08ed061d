"""The Paddock client: sessions and their operations over one NATS connection.

    client = await paddock.connect()               # PADDOCK_URL, PADDOCK_CREDS, PADDOCK_TENANT
    sess = await client.create(image="paddock/sandbox-python:test")
    res = await sess.exec(["python3", "-c", "print(6*7)"])

Every method is one or a few Paddock ops (docs/architecture.md); errors are the classes of
:mod:`paddock.errors`, each a :class:`~paddock.errors.PaddockError` with a stable ``code``.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import math
import os
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import IO, Any

from nats.aio.client import Client as NatsClient
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

from ._trace import Trace
from ._transport import DEFAULT_TIMEOUT, WORKSPACE_TIMEOUT, Credentials, Transport, connect_nats
from .contract import (
    INLINE_LIMIT,
    OP_CHECKPOINT,
    OP_CREATE,
    OP_DELETE,
    OP_EXEC,
    OP_FORK,
    OP_HYDRATE,
    OP_LS,
    OP_MKDIR,
    OP_PERSIST,
    OP_PORT,
    OP_PROC_LIST,
    OP_PROC_READ,
    OP_PROC_RESIZE,
    OP_PROC_SIGNAL,
    OP_PROC_START,
    OP_PROC_WRITE,
    OP_READ,
    OP_RESUME,
    OP_RM,
    OP_RUNNING,
    OP_SHUTDOWN,
    OP_START,
    OP_STOP,
    OP_WRITE,
    SUBJECT_PREFIX,
)
from .errors import InvalidRequest, PaddockError, PermissionDenied, Unavailable

# How long resume keeps asking the scheduler while it answers a retryable error (a node that
# just died and is not yet known gone, one that just started, a racing writer): then it raises.
RESUME_RETRY_S = 60.0

EVENTS_STREAM = "SBX_EVENTS"


def _decode(text: str | None, encoding: str | None) -> bytes:
    if not text:
        return b""
    if encoding == "base64":
        return base64.b64decode(text)
    return text.encode("utf-8")


@dataclass(frozen=True)
class ExecResult:
    """A finished command: its exit code and output (capped by the node, see ``*_truncated``)."""

    exit_code: int
    stdout: bytes
    stderr: bytes
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    duration_ms: float = 0.0

    @property
    def ok(self) -> bool:
        """Whether the command exited 0."""
        return self.exit_code == 0


@dataclass(frozen=True)
class Entry:
    """One entry of a listing; ``path`` is the full path (the listed path itself for a file)."""

    path: str
    name: str
    type: str  # "file", "dir", "symlink", "other"
    size: int
    mode: int
    mtime: str = ""


@dataclass(frozen=True)
class ProcOutput:
    """What a process said during one yield window, and whether it still runs."""

    process_id: int
    output: bytes
    running: bool
    exit_code: int | None = None
    reason: str = ""
    dropped_bytes: int = 0
    pending_bytes: int = 0


@dataclass(frozen=True)
class Endpoint:
    """Where a sandbox port is reachable: an address on the session's node that forwards to it."""

    host: str
    port: int
    sandbox_port: int
    node: str = ""


def _ms(seconds: float | None) -> int | None:
    return None if seconds is None else max(0, math.ceil(seconds * 1000))


class Process:
    """An interactive process of a session (Paddock's proc_* ops), with or without a TTY."""

    def __init__(self, session: Session, process_id: int, tty: bool) -> None:
        self.session = session
        self.id = process_id
        self.tty = tty

    def _out(self, res: dict[str, Any]) -> ProcOutput:
        return ProcOutput(
            process_id=int(res.get("process_id", self.id)),
            output=_decode(res.get("output"), res.get("output_encoding")),
            running=bool(res.get("running")),
            exit_code=res.get("exit_code"),
            reason=str(res.get("reason") or ""),
            dropped_bytes=int(res.get("dropped_bytes") or 0),
            pending_bytes=int(res.get("pending_bytes") or 0),
        )

    async def read(self, *, yield_s: float = 0.25, return_on_output: bool = False, max_output_bytes: int | None = None) -> ProcOutput:
        """Output gathered for up to ``yield_s`` (less with ``return_on_output`` once some came)."""
        args: dict[str, Any] = {"process_id": self.id, "yield_ms": _ms(yield_s), "return_on_output": return_on_output}
        if max_output_bytes:
            args["max_output_bytes"] = max_output_bytes
        return self._out(await self.session._op(OP_PROC_READ, args, timeout=yield_s + self.session.client.timeout))

    async def write(self, data: bytes | str, *, close_stdin: bool = False, yield_s: float = 0.25, return_on_output: bool = False) -> ProcOutput:
        """Write ``data`` to the process's stdin (its TTY), then read as :meth:`read` does."""
        raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        args: dict[str, Any] = {"process_id": self.id, "yield_ms": _ms(yield_s), "return_on_output": return_on_output}
        if raw:
            args["input"] = base64.b64encode(raw).decode()
        if close_stdin:
            args["close_stdin"] = True
        return self._out(await self.session._op(OP_PROC_WRITE, args, timeout=yield_s + self.session.client.timeout))

    async def signal(self, signal: str = "TERM") -> None:
        """Send ``signal`` (TERM, KILL, INT, HUP, ...) to the process's group."""
        await self.session._op(OP_PROC_SIGNAL, {"process_id": self.id, "signal": signal})

    async def resize(self, rows: int, cols: int) -> None:
        """Resize the process's TTY."""
        await self.session._op(OP_PROC_RESIZE, {"process_id": self.id, "rows": rows, "cols": cols})


class Session:
    """One Paddock session (a sandbox and its recorded history), addressed by id."""

    def __init__(self, client: Client, session_id: str, *, node: str = "", runtime: str = "", epoch: int = 0,
                 parent: dict[str, Any] | None = None) -> None:
        self.client = client
        self.id = session_id
        self.node = node
        self.runtime = runtime
        self.epoch = epoch
        self.parent = parent

    def __repr__(self) -> str:
        return f"Session({self.id!r}, node={self.node!r})"

    async def _op(self, op: str, args: Any = None, *, timeout: float | None = None, trace: Trace | None = None,
                  command_id: str | None = None) -> Any:
        t = self.client.transport
        return await t.request(t.session_subject(self.id, op), args, session=self.id, timeout=timeout or self.client.timeout,
                               trace=trace or self.client._default_trace(), command_id=command_id)

    # --- commands ---

    async def exec(
        self,
        argv: list[str] | tuple[str, ...] | str,
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
        timeout: float | None = None,
        max_output_bytes: int | None = None,
        trace: Trace | None = None,
    ) -> ExecResult:
        """Run a command and wait for it. ``argv`` is a list (no shell), or a string run by
        ``/bin/sh -c``. ``timeout`` (seconds) kills the command's process group (ExecTimeout);
        a non-zero exit is a result, not an error."""
        args: dict[str, Any] = {}
        if isinstance(argv, str):
            args["shell"] = argv
        else:
            if not argv:
                raise InvalidRequest("exec: an empty argv")
            args["argv"] = [str(a) for a in argv]
        if timeout is not None:
            args["timeout_ms"] = max(1, _ms(timeout) or 1)
        if cwd:
            args["cwd"] = cwd
        if env:
            args["env"] = dict(env)
        if user:
            args["user"] = user
        if max_output_bytes:
            args["max_output_bytes"] = max_output_bytes
        res = await self._op(OP_EXEC, args, timeout=(timeout or 600.0) + self.client.timeout, trace=trace)
        return ExecResult(
            exit_code=int(res.get("exit_code", 0)),
            stdout=_decode(res.get("stdout"), res.get("stdout_encoding")),
            stderr=_decode(res.get("stderr"), res.get("stderr_encoding")),
            stdout_truncated=bool(res.get("stdout_truncated")),
            stderr_truncated=bool(res.get("stderr_truncated")),
            duration_ms=float(res.get("duration_ms") or 0.0),
        )

    async def shell(self, command: str, *, login: bool = False, **kw: Any) -> ExecResult:
        """Run ``command`` with ``sh -c`` (``sh -lc`` with ``login``: a login shell reads the
        profile, which costs tens of milliseconds more); keyword arguments as :meth:`exec`."""
        return await self.exec(["sh", "-lc" if login else "-c", command], **kw)

    async def read(self, path: str) -> bytes:
        """A file's content; files over the inline limit come through the transfer service."""
        buf = io.BytesIO()
        await self.read_to(path, buf)
        return buf.getvalue()

    async def read_to(self, path: str, sink: IO[bytes]) -> int:
        """Stream a file into ``sink`` (anything with ``write(bytes)``); returns its size."""
        res = await self._op(OP_READ, {"path": path}, timeout=WORKSPACE_TIMEOUT)
        if not res.get("download"):
            data = base64.b64decode(res.get("content") or "")
            sink.write(data)
            return len(data)
        n = await self.client.transport.download(res["download"], sink)
        if n != int(res.get("size", n)):
            raise Unavailable(f"read {path}: got {n} of {res.get('size')} bytes")
        return n

    async def write(self, path: str, data: bytes | str | IO[bytes] | Iterable[bytes], *, mode: int | None = None) -> dict[str, Any]:
        """Write a file (bytes, text, a binary file object or an iterable of chunks); content
        over the inline limit is uploaded through the transfer service first. Returns
        {"size", "sha256"}."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        if isinstance(data, (bytes, bytearray, memoryview)):
            head, rest = bytes(data[: INLINE_LIMIT + 1]), iter([bytes(data[INLINE_LIMIT + 1 :])])
        else:
            rest = _chunks(data)
            head = b""
            for b in rest:
                head += b
                if len(head) > INLINE_LIMIT:
                    break
        args: dict[str, Any] = {"path": path}
        if mode is not None:
            args["mode"] = mode
        if len(head) <= INLINE_LIMIT:
            args["content"] = base64.b64encode(head).decode()
            return await self._op(OP_WRITE, args)

        def all_chunks() -> Iterable[bytes]:
            yield head
            yield from rest

        t = self.client.transport
        name, size = await t.upload(all_chunks())
        try:
            return await self._op(OP_WRITE, {**args, "upload": name, "size": size}, timeout=WORKSPACE_TIMEOUT)
        except PaddockError:
            await t.discard(name)
            raise

    async def ls(self, path: str) -> list[Entry]:
        """The entries of a directory (all pages); of a file or a symlink, that path itself (one
        entry whose ``path`` is ``path``)."""
        out: list[Entry] = []
        args: dict[str, Any] = {"path": path}
        base = path.rstrip("/").rpartition("/")[2]
        while True:
            res = await self._op(OP_LS, args)
            entries = res.get("entries") or []
            if ("after" not in args and not res.get("next") and len(entries) == 1 and entries[0].get("type") != "dir"
                    and entries[0].get("name") in (base, "", ".") and await self._not_dir(path, base)):
                e = entries[0]
                return [Entry(path=path, name=base, type=str(e.get("type", "other")), size=int(e.get("size", 0)),
                              mode=int(e.get("mode", 0)), mtime=str(e.get("mtime", "")))]
            for e in entries:
                name = str(e.get("name", ""))
                out.append(Entry(path=f"{path.rstrip('/')}/{name}", name=name, type=str(e.get("type", "other")),
                                 size=int(e.get("size", 0)), mode=int(e.get("mode", 0)), mtime=str(e.get("mtime", ""))))
            if not res.get("next"):
                return out
            args = {"path": path, "after": res["next"]}

    async def _not_dir(self, path: str, base: str) -> bool:
        """Whether ``path``, whose listing is one entry named like it, is not a directory: a file
        (or symlink) lists as itself, a directory ``a`` holding only ``a/a`` looks the same.
        The parent's listing, from just before that name, tells them apart."""
        parent = path.rstrip("/").rpartition("/")[0] or "/"
        args: dict[str, Any] = {"path": parent, "after": base[:-1]}
        while True:
            res = await self._op(OP_LS, args)
            for e in res.get("entries") or []:
                if e.get("name") == base:
                    return e.get("type") != "dir"
            if not res.get("next"):
                return True
            args = {"path": parent, "after": res["next"]}

    async def rm(self, path: str, *, recursive: bool = False, force: bool = False) -> None:
        """Remove a file or (``recursive``) a tree; ``force``: a missing path is fine."""
        await self._op(OP_RM, {"path": path, "recursive": recursive, "force": force})

    async def mkdir(self, path: str, *, parents: bool = False) -> None:
        """Make a directory (``parents``: and its missing parents, as ``mkdir -p``)."""
        await self._op(OP_MKDIR, {"path": path, "parents": parents})

    # --- processes ---

    async def start_process(
        self,
        argv: list[str] | str,
        *,
        tty: bool = False,
        rows: int | None = None,
        cols: int | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
        yield_s: float = 0.0,
        return_on_output: bool = False,
    ) -> tuple[Process, ProcOutput]:
        """Start an interactive process (a PTY with ``tty``); returns it and what it said within
        ``yield_s``."""
        args: dict[str, Any] = {"tty": tty, "yield_ms": _ms(yield_s), "return_on_output": return_on_output}
        if isinstance(argv, str):
            args["shell"] = argv
        else:
            args["argv"] = [str(a) for a in argv]
        for k, v in (("rows", rows), ("cols", cols), ("cwd", cwd), ("user", user)):
            if v:
                args[k] = v
        if env:
            args["env"] = dict(env)
        res = await self._op(OP_PROC_START, args, timeout=yield_s + self.client.timeout)
        proc = Process(self, int(res["process_id"]), tty)
        return proc, proc._out(res)

    def process(self, process_id: int, *, tty: bool = False) -> Process:
        """A handle on a process this session started (no request is sent)."""
        return Process(self, process_id, tty)

    async def processes(self) -> list[dict[str, Any]]:
        """The session's interactive processes (running and recently ended)."""
        return list((await self._op(OP_PROC_LIST)).get("processes") or [])

    # --- ports, lifecycle, workspace ---

    async def port(self, port: int) -> Endpoint:
        """Where the sandbox's ``port`` (one of the create's exposed ports) is reachable."""
        res = await self._op(OP_PORT, {"port": port})
        return Endpoint(host=str(res["host"]), port=int(res["port"]), sandbox_port=int(res.get("sandbox_port", port)),
                        node=str(res.get("node", "")))

    async def running(self) -> bool:
        """Whether the sandbox runs (False for a stopped session)."""
        return bool((await self._op(OP_RUNNING)).get("running"))

    async def start(self) -> None:
        """Start a stopped session's sandbox again."""
        await self._op(OP_START, timeout=WORKSPACE_TIMEOUT)

    async def persist(self) -> dict[str, Any]:
        """Snapshot the workspace (an unchanged workspace records the last snapshot again);
        returns the snapshot ({"snapshot_id", "sha256", ...})."""
        res = await self._op(OP_PERSIST, timeout=WORKSPACE_TIMEOUT)
        return dict(res.get("snapshot") or {})

    async def checkpoint(self, *, leave_running: bool = False) -> dict[str, Any]:
        """Snapshot the processes and their memory with the workspace (contract 1.6; a
        session on a runsc node: other runtimes answer PolicyDenied). Without
        ``leave_running`` the sandbox stops; ``resume`` brings the processes back running.
        Returns the memory snapshot ({"snapshot_id", "kind": "memory", "memory", ...})."""
        args = {"leave_running": True} if leave_running else None
        res = await self._op(OP_CHECKPOINT, args, timeout=WORKSPACE_TIMEOUT)
        return dict((res or {}).get("snapshot") or {})

    async def hydrate(self, tar: bytes | IO[bytes] | Iterable[bytes]) -> dict[str, Any]:
        """Replace the workspace with a tar archive (checked before anything is extracted)."""
        t = self.client.transport
        name, _ = await t.upload(_chunks(tar))
        try:
            return await self._op(OP_HYDRATE, {"upload": name}, timeout=WORKSPACE_TIMEOUT)
        except PaddockError:
            await t.discard(name)
            raise

    async def stop(self) -> dict[str, Any]:
        """Persist the workspace and stop the sandbox; returns the snapshot (may be empty)."""
        res = await self._op(OP_STOP, timeout=WORKSPACE_TIMEOUT)
        return dict((res or {}).get("snapshot") or {})

    async def shutdown(self) -> dict[str, Any]:
        """Persist (when running) and remove the sandbox; the session stays resumable."""
        res = await self._op(OP_SHUTDOWN, timeout=WORKSPACE_TIMEOUT)
        return dict((res or {}).get("snapshot") or {})

    async def delete(self) -> None:
        """Delete the session and its sandbox (its history stays)."""
        await self._op(OP_DELETE, timeout=WORKSPACE_TIMEOUT)

    async def resume(self, **kw: Any) -> Session:
        """Resume this session (Client.resume); updates and returns self."""
        s = await self.client.resume(self.id, **kw)
        self.node, self.epoch = s.node, s.epoch
        return self

    async def fork(self, n: int = 1, **kw: Any) -> list[Session]:
        """Fork this session (Client.fork)."""
        return await self.client.fork(self.id, n, **kw)

    def events(self, *, follow: bool = True) -> AsyncIterator[dict[str, Any]]:
        """This session's events (Client.events)."""
        return self.client.events(self.id, follow=follow)

    async def export(self) -> list[dict[str, Any]]:
        """This session's recorded events (Client.export)."""
        return await self.client.export(self.id)


def _chunks(data: bytes | IO[bytes] | Iterable[bytes]) -> Iterable[bytes]:
    if isinstance(data, (bytes, bytearray, memoryview)):
        yield bytes(data)
        return
    read = getattr(data, "read", None)
    if read is not None:
        while True:
            b = read(1 << 20)
            if not b:
                return
            yield b.encode("utf-8") if isinstance(b, str) else bytes(b)
    else:
        for b in data:  # type: ignore[union-attr]
            yield bytes(b)


class Client:
    """A tenant's view of a Paddock deployment over one NATS connection (see :func:`connect`)."""

    def __init__(self, nc: NatsClient, tenant: str, *, creds: Credentials | None = None, owns_connection: bool = True,
                 actor: str = "", timeout: float = DEFAULT_TIMEOUT, trace: Trace | Callable[[], Trace | None] | None = None,
                 prefix: str = SUBJECT_PREFIX) -> None:
        self.nc = nc
        self.tenant = tenant
        self.creds = creds
        self.timeout = timeout
        #: Trace context sent with every request that gives none of its own: a Trace, or a
        #: function returning the current one (an integration's own tracing, per request).
        self.trace = trace
        self.transport = Transport(nc, tenant, prefix=prefix, actor=actor)
        self._owns = owns_connection

    def _default_trace(self) -> Trace | None:
        return self.trace() if callable(self.trace) else self.trace

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connection when :func:`connect` opened it (sessions keep running)."""
        if self._owns and not self.nc.is_closed:
            await self.nc.close()

    @property
    def is_closed(self) -> bool:
        """Whether the NATS connection is closed."""
        return bool(self.nc.is_closed)

    def session(self, session_id: str) -> Session:
        """A handle on an existing session (no request is sent)."""
        return Session(self, session_id)

    async def create(
        self,
        image: str | None = None,
        *,
        session_id: str | None = None,
        runtime: str | None = None,
        env: dict[str, str] | None = None,
        secret_env: dict[str, str] | None = None,
        labels: dict[str, str] | None = None,
        node_labels: dict[str, str] | None = None,
        cpus: float | None = None,
        memory_bytes: int | None = None,
        disk_bytes: int | None = None,
        pids_limit: int | None = None,
        lifetime_s: int | None = None,
        idle_timeout_s: int | None = None,
        max_processes: int | None = None,
        network: bool | None = None,
        network_allow: Iterable[str] = (),
        user: str | None = None,
        exposed_ports: Iterable[int] = (),
        workspace_root: str | None = None,
        trace: Trace | None = None,
    ) -> Session:
        """Create and start a session (the engine's scheduler places it); returns it once running.
        ``exposed_ports`` are deduplicated; ``network_allow`` is the egress allow list."""
        args: dict[str, Any] = {}
        for k, v in (("session_id", session_id), ("runtime", runtime), ("image", image), ("cpus", cpus),
                     ("memory_bytes", memory_bytes), ("disk_bytes", disk_bytes), ("pids_limit", pids_limit),
                     ("lifetime_s", lifetime_s), ("idle_timeout_s", idle_timeout_s), ("max_processes", max_processes),
                     ("network", network), ("user", user)):
            if v is not None:
                args[k] = v
        for k, m in (("env", env), ("secret_env", secret_env), ("labels", labels), ("node_labels", node_labels)):
            if m:
                args[k] = dict(m)
        if workspace_root and workspace_root != "/workspace":
            args["workspace_root"] = workspace_root
        ports = sorted({int(p) for p in exposed_ports})
        if ports:
            args["exposed_ports"] = ports
        allow = list(dict.fromkeys(network_allow))
        if allow:
            args["egress"] = {"mode": "allow", "allow": allow}
        t = self.transport
        res = await t.request(t.tenant_subject(OP_CREATE), args, timeout=max(self.timeout, 120.0), trace=trace or self._default_trace())
        return Session(self, str(res.get("session_id") or session_id), node=str(res.get("node", "")),
                       runtime=str(res.get("runtime", "")), epoch=1)

    async def lookup(self, session_id: str) -> dict[str, Any]:
        """The engine's view of a session: {"status", "node"}; raises SessionNotFound."""
        return await self.transport.lookup(session_id)

    async def resume(self, session_id: str, *, secret_env: dict[str, str] | None = None, empty: bool = False,
                     at_seq: int | None = None, trace: Trace | None = None) -> Session:
        """Resume a session: on the node that serves it, else through the engine's scheduler,
        which re-creates it on a node from its last snapshot (``empty``: with an empty
        workspace; ``at_seq``: from the last snapshot at or before that seq). Raises
        SessionNotFound (deleted), SnapshotNotFound (never persisted: pass ``empty``)."""
        t = self.transport
        args: dict[str, Any] = {}
        if secret_env:
            args["secret_env"] = dict(secret_env)
        if empty:
            args["empty"] = True
        if at_seq is not None:
            args["at_seq"] = at_seq
        trace = trace or self._default_trace()
        res: dict[str, Any] | None = None
        if not empty and at_seq is None:
            try:
                res = await t.request(t.session_subject(session_id, OP_RESUME), args, timeout=WORKSPACE_TIMEOUT, trace=trace,
                                      fallback_no_responders=True)
            except NoRespondersError:
                res = None
        if res is None:
            res = await self._resume_placed({"session_id": session_id, **args}, trace)
        return Session(self, session_id, node=str(res.get("node", "")), epoch=int(res.get("epoch") or 0))

    async def _resume_placed(self, args: dict[str, Any], trace: Trace | None) -> dict[str, Any]:
        """The scheduler's resume; a retryable error means it ran nothing: asked again, each
        time as a new command, with backoff, for RESUME_RETRY_S."""
        t = self.transport
        loop = asyncio.get_running_loop()
        give_up = loop.time() + RESUME_RETRY_S
        wait = 0.2
        while True:
            try:
                return await t.request(t.tenant_subject(OP_RESUME), args, timeout=WORKSPACE_TIMEOUT, trace=trace)
            except PaddockError as e:
                if not e.retryable or loop.time() + wait > give_up:
                    raise
            await asyncio.sleep(wait)
            wait = min(2 * wait, 2.0)

    async def fork(self, session_id: str, n: int = 1, *, snapshot_id: str | None = None, at_seq: int | None = None,
                   secret_env: dict[str, str] | None = None, trace: Trace | None = None) -> list[Session]:
        """Fork a session into ``n`` new ones with its workspace at one recorded point (the
        snapshot ``snapshot_id``, the last at or before ``at_seq``, else a persist made first);
        returns the children that came up, each with ``parent`` set."""
        args: dict[str, Any] = {"session_id": session_id, "n": n}
        if snapshot_id is not None:
            args["snapshot_id"] = snapshot_id
        if at_seq is not None:
            args["at_seq"] = at_seq
        if secret_env:
            args["secret_env"] = dict(secret_env)
        t = self.transport
        res = await t.request(t.tenant_subject(OP_FORK), args, timeout=WORKSPACE_TIMEOUT, trace=trace or self._default_trace())
        parent = dict(res.get("parent") or {})
        return [Session(self, str(c), parent=parent, epoch=1) for c in res.get("children") or []]

    async def delete(self, session_id: str) -> None:
        """Delete a session (Session.delete)."""
        await self.session(session_id).delete()

    # --- events (the events stream: needs an admin's or the engine's credentials) ---

    def _events_subject(self, session_id: str | None) -> str:
        return f"{self.transport.prefix}.evt.{self.tenant}.{session_id or '*'}.>"

    async def events(self, session_id: str | None = None, *, follow: bool = True, idle_s: float = 1.0) -> AsyncIterator[dict[str, Any]]:
        """The tenant's (or one session's) events as recorded, oldest first, as dicts (the
        fields of docs/architecture.md's event envelope); with ``follow`` it then waits for new
        ones (an async iterator: break out to stop). Reading the events stream needs an admin's
        credentials (a client's may only send commands): PermissionDenied otherwise."""
        from nats.js.api import DeliverPolicy
        from nats.js.errors import Error as JsError

        js = self.nc.jetstream()
        try:
            sub = await js.subscribe(self._events_subject(session_id), stream=EVENTS_STREAM, ordered_consumer=True,
                                     deliver_policy=DeliverPolicy.ALL)
        except (JsError, NoRespondersError, asyncio.TimeoutError) as e:
            raise PermissionDenied(f"cannot read the events stream: {type(e).__name__} {e}") from e
        try:
            while True:
                try:
                    msg = await sub.next_msg(timeout=idle_s if not follow else 3600.0)
                except (NatsTimeoutError, asyncio.TimeoutError):
                    if follow:
                        continue
                    return
                yield json.loads(msg.data)
                if not follow and msg.metadata.num_pending == 0:
                    return
        finally:
            await sub.unsubscribe()

    async def export(self, session_id: str | None = None) -> list[dict[str, Any]]:
        """Every recorded event of the tenant (or one session), oldest first (events, without follow)."""
        return [e async for e in self.events(session_id, follow=False)]


async def connect(
    url: str | None = None,
    creds: str | None = None,
    tenant: str | None = None,
    tls_ca: str | None = None,
    nc: NatsClient | None = None,
    *,
    actor: str = "",
    name: str = "paddock-python",
    timeout: float = DEFAULT_TIMEOUT,
    trace: Trace | Callable[[], Trace | None] | None = None,
) -> Client:
    """Connect to Paddock and return a :class:`Client`.

    ``url`` falls back to $PADDOCK_URL (else nats://127.0.0.1:4222), ``creds`` (a Paddock JSON
    credentials file or an nkey seed ``*.nk`` file; ``"none"``: no credentials) to
    $PADDOCK_CREDS, ``tenant`` to $PADDOCK_TENANT, then the credentials' tenant, then
    "default"; ``tls_ca`` (a PEM CA file) to $PADDOCK_TLS_CA. With ``nc`` (a connected nats.py
    client) no connection is made and :meth:`Client.close` leaves it open. Raises PaddockError
    (PermissionDenied, Unavailable, InvalidRequest).
    """
    loaded: Credentials | None = None
    owns = nc is None
    if nc is None:
        nc, loaded = await connect_nats(url, creds, tls_ca=tls_ca, name=name)
    tenant = tenant or os.environ.get("PADDOCK_TENANT") or (loaded.tenant if loaded and loaded.tenant else "") or "default"
    return Client(nc, tenant, creds=loaded, owns_connection=owns, actor=actor, timeout=timeout, trace=trace)


__all__ = [
    "Client",
    "Endpoint",
    "Entry",
    "ExecResult",
    "ProcOutput",
    "Process",
    "Session",
    "connect",
]
