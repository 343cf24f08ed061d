"""PaddockSandboxClient and PaddockSandboxSession: the OpenAI Agents SDK's sandbox layer on Paddock.

Every SDK operation is one or more Paddock ops (create, exec, read, write, ls, rm, mkdir, running,
persist, hydrate, resume, stop, shutdown, delete, proc_*), so each lands in Paddock's audit stream,
carrying the SDK's trace id and span id when tracing is on.

Lifecycle, SDK call -> Paddock ops:

    client.create      -> create (the sandbox runs from here on)
    session.start      -> start when the sandbox is not running; the SDK then materialises the
                          manifest with write/mkdir (or restores its snapshot with hydrate)
    session.stop       -> persist (Paddock snapshot) + the SDK's tar (exec tar, read, rm)
    session.shutdown   -> stop (persists) + shutdown
    client.resume      -> resume on the session's node, else the scheduler's resume (another node);
                          a deleted session is re-created and the SDK restores its snapshot
    client.delete      -> delete
"""

from __future__ import annotations

import asyncio
import base64
import io
import math
import stat
import tarfile
import tempfile
import uuid
from pathlib import Path
from typing import Any, Literal

from agents.sandbox.errors import (
    ExecNonZeroError,
    ExposedPortUnavailableError,
    ExecTimeoutError,
    ExecTransportError,
    PtySessionNotFoundError,
    WorkspaceArchiveReadError,
    WorkspaceArchiveWriteError,
    WorkspaceReadNotFoundError,
    WorkspaceStartError,
)
from agents.sandbox.files import EntryKind, FileEntry
from agents.sandbox.manifest import Manifest
from agents.sandbox.session import SandboxSession, SandboxSessionState
from agents.sandbox.session.base_sandbox_session import BaseSandboxSession
from agents.sandbox.session.dependencies import Dependencies
from agents.sandbox.session.manager import Instrumentation
from agents.sandbox.session.pty_types import (
    PtyExecUpdate,
    clamp_pty_yield_time_ms,
    resolve_pty_write_yield_time_ms,
)
from agents.sandbox.session.sandbox_client import BaseSandboxClient, BaseSandboxClientOptions
from agents.sandbox.session.workspace_payloads import coerce_write_payload
from agents.sandbox.snapshot import SnapshotBase, SnapshotSpec, resolve_snapshot
from agents.sandbox.types import ExecResult, ExposedPortEndpoint, Permissions, User
from agents.sandbox.workspace_paths import sandbox_path_str
from agents.tracing import get_current_span, get_current_trace
from nats.errors import NoRespondersError
from pydantic import Field

from .contract import (
    INLINE_LIMIT,
    OP_CREATE,
    OP_DELETE,
    OP_EXEC,
    OP_FORK,
    OP_HYDRATE,
    OP_LS,
    OP_MKDIR,
    OP_PERSIST,
    OP_PORT,
    OP_PROC_READ,
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
)
from .errors import (
    AlreadyExists,
    ExecTimeout,
    InvalidState,
    NotFound,
    PaddockError,
    SessionNotFound,
    SnapshotNotFound,
    Unavailable,
)
from .transport import (
    DEFAULT_TIMEOUT,
    WORKSPACE_TIMEOUT,
    Transport,
    connect,
)

BACKEND_ID = "paddock"


class PaddockSandboxClientOptions(BaseSandboxClientOptions):
    """Where Paddock is and what to create there.

    ``url`` and ``creds`` fall back to $PADDOCK_URL and $PADDOCK_CREDS; ``tenant`` to the
    credentials' tenant (else "default"). ``secret_env`` values are given to the sandbox and never
    recorded by Paddock; they are not serialised with the options or the session state, so pass
    them again to a client that resumes a session whose sandbox must be re-created.
    """

    type: Literal["paddock"] = "paddock"
    url: str | None = None
    creds: str | None = None
    tenant: str | None = None
    image: str | None = None
    runtime: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    secret_env: dict[str, str] = Field(default_factory=dict, exclude=True, repr=False)
    labels: dict[str, str] = Field(default_factory=dict)
    node_labels: dict[str, str] = Field(default_factory=dict)
    cpus: float | None = None
    memory_bytes: int | None = None
    # disk_bytes (contract 1.5): all the sandbox may write (workspace, /tmp, ...); None: the node's default.
    disk_bytes: int | None = None
    pids_limit: int | None = None
    lifetime_s: int | None = None
    idle_timeout_s: int | None = None
    max_processes: int | None = None
    network: bool | None = None
    user: str | None = None
    exposed_ports: tuple[int, ...] = ()
    # network_allow (contract 1.4): the only destinations the sandbox may reach, through the
    # node's egress proxy ("host[:port]", "*.domain[:port]", "IP[:port]", "CIDR"); the Docker
    # runtime enforces it, the local one refuses it. Empty: network decides (none by default).
    network_allow: tuple[str, ...] = ()
    timeout_s: float = DEFAULT_TIMEOUT

    def create_args(self, *, session_id: str, workspace_root: str) -> dict[str, Any]:
        """The args of Paddock's create for these options."""
        args: dict[str, Any] = {"session_id": session_id}
        for key in ("runtime", "image", "cpus", "memory_bytes", "disk_bytes", "pids_limit", "lifetime_s", "idle_timeout_s", "max_processes", "network", "user"):
            value = getattr(self, key)
            if value is not None:
                args[key] = value
        for key in ("env", "secret_env", "labels", "node_labels"):
            value = getattr(self, key)
            if value:
                args[key] = dict(value)
        if workspace_root != "/workspace":
            args["workspace_root"] = workspace_root
        if self.exposed_ports:
            args["exposed_ports"] = list(self.exposed_ports)
        if self.network_allow:
            args["egress"] = {"mode": "allow", "allow": list(self.network_allow)}
        return args


class PaddockSandboxSessionState(SandboxSessionState):
    """The SDK's session state plus where the session lives in Paddock (no secrets, no creds)."""

    type: Literal["paddock"] = "paddock"
    paddock_session_id: str
    tenant: str
    node: str | None = None
    runtime: str | None = None
    epoch: int = 1
    paddock_snapshot_id: str | None = None
    # paddock_parent (issue 25): where a forked session came from, as its create recorded it
    # ({"session_id", "seq", "snapshot", "root_sha256"}); None for a session that was created.
    paddock_parent: dict[str, Any] | None = None
    options: dict[str, Any] = Field(default_factory=dict)


def _trace_ids() -> tuple[str | None, str | None]:
    """The SDK's current trace id and span id, for Paddock's trace_id and parent_span_id."""
    trace = get_current_trace()
    if trace is None or trace.export() is None:
        return None, None
    span = get_current_span()
    return trace.trace_id, (span.span_id if span is not None else None)


def _decode_output(text: str | None, encoding: str | None) -> bytes:
    if not text:
        return b""
    if encoding == "base64":
        return base64.b64decode(text)
    return text.encode("utf-8")


def _filter_tar(raw: io.IOBase, *, skip: set[str]) -> io.IOBase:
    """A copy of the tar ``raw`` without the members under any workspace-relative path in skip."""
    out = tempfile.SpooledTemporaryFile(max_size=8 << 20)
    with tarfile.open(fileobj=raw, mode="r:") as src, tarfile.open(fileobj=out, mode="w:") as dst:
        for m in src:
            rel = m.name[2:] if m.name.startswith("./") else m.name
            rel = rel.rstrip("/")
            if any(rel == p or rel.startswith(p + "/") for p in skip):
                continue
            dst.addfile(m, src.extractfile(m) if m.isreg() else None)
    out.seek(0)
    return out  # type: ignore[return-value]


def _check_manifest(manifest: Manifest) -> None:
    """Refuse, before anything is created, what a Paddock sandbox cannot do (see the README)."""
    if manifest.users or manifest.groups:
        raise ValueError(
            "Paddock sandboxes do not provision manifest users or groups: commands run as the "
            "image's non-root user (or exec's user=, which the node's policy may refuse for root)"
        )
    if manifest.mount_targets():
        raise ValueError(
            "Paddock sandboxes do not support manifest mounts: they have no capabilities (no FUSE, "
            "no mount) and no network by default; put the data in the workspace instead"
        )
    if any(g.host_path is not None for g in manifest.extra_path_grants):
        raise ValueError("Paddock sandboxes do not support path grants with host_path: the host is not the sandbox")


class PaddockSandboxSession(BaseSandboxSession):
    """One Paddock session. Paths are the SDK's workspace paths, sent as absolute paths under the
    manifest root (Paddock's workspace root), which Paddock confines again on the node."""

    state: PaddockSandboxSessionState

    def __init__(self, *, state: PaddockSandboxSessionState, transport: Transport, secret_env: dict[str, str] | None = None) -> None:
        self.state = state
        self._t = transport
        self._secret_env = dict(secret_env or {})
        self._procs: set[int] = set()

    # --- plumbing ---

    @property
    def paddock_session_id(self) -> str:
        return self.state.paddock_session_id

    async def _op(self, op: str, args: Any = None, *, timeout: float | None = None, command_id: str | None = None) -> Any:
        sid = self.state.paddock_session_id
        return await self._t.request(
            self._t.session_subject(sid, op),
            args,
            session=sid,
            timeout=timeout or self._timeout(),
            command_id=command_id,
            trace=_trace_ids(),
        )

    def _timeout(self) -> float:
        return float(self.state.options.get("timeout_s") or DEFAULT_TIMEOUT)

    def _path(self, path: Path | str, *, for_write: bool = False) -> str:
        return sandbox_path_str(self.normalize_path(path, for_write=for_write))

    # --- fork (issue 25) ---

    async def fork(
        self,
        n: int = 1,
        *,
        snapshot_id: str | None = None,
        at_seq: int | None = None,
        secret_env: dict[str, str] | None = None,
    ) -> list[PaddockSandboxSession]:
        """Fork this session into ``n`` new sessions with its workspace at one recorded point:
        the snapshot ``snapshot_id`` or the last one recorded at or before ``at_seq`` of this
        session's history, else a persist the fork makes first. The children get this session's
        image, limits, egress and environment; secret values only as ``secret_env`` gives them
        (default: this session's, as this process holds them). Returns the children that came up,
        sharing this session's connection; each state's ``paddock_parent`` is the point. Raises
        PaddockError (InvalidState: resume the session first; PolicyDenied: n over the operator's
        maximum; SnapshotNotFound)."""
        args: dict[str, Any] = {"session_id": self.state.paddock_session_id, "n": n}
        if snapshot_id is not None:
            args["snapshot_id"] = snapshot_id
        if at_seq is not None:
            args["at_seq"] = at_seq
        secrets = dict(self._secret_env if secret_env is None else secret_env)
        if secrets:
            args["secret_env"] = secrets
        res = await self._t.request(self._t.tenant_subject(OP_FORK), args, timeout=WORKSPACE_TIMEOUT, trace=_trace_ids())
        parent = dict(res.get("parent") or {})
        children: list[PaddockSandboxSession] = []
        for child in res.get("children") or []:
            state = self.state.model_copy(
                deep=True,
                update={
                    "session_id": uuid.UUID(child),
                    "paddock_session_id": child,
                    "paddock_parent": parent,
                    "paddock_snapshot_id": None,
                    "node": None,
                    "epoch": 1,
                },
            )
            children.append(PaddockSandboxSession(state=state, transport=self._t, secret_env=secrets))
        return children

    # --- lifecycle ---

    async def provision_manifest_accounts(self) -> None:
        _check_manifest(self.state.manifest)

    async def _ensure_backend_started(self) -> None:
        try:
            if not await self.running():
                await self._op(OP_START)
        except PaddockError as e:
            raise WorkspaceStartError(path=Path(self.state.manifest.root), cause=e, message=str(e), retryable=e.retryable) from e

    async def running(self) -> bool:
        try:
            res = await self._op(OP_RUNNING)
        except PaddockError as e:
            if isinstance(e, (SessionNotFound, Unavailable, InvalidState)):
                return False
            raise
        return bool(res.get("running"))

    async def _shutdown_backend(self) -> None:
        # stop persists the workspace as a Paddock snapshot first, so a later resume (on any node)
        # restores it; then shutdown removes the sandbox. Both are best effort, as the SDK asks.
        for op in (OP_STOP, OP_SHUTDOWN):
            try:
                res = await self._op(op, timeout=WORKSPACE_TIMEOUT)
            except PaddockError:
                continue
            snap = (res or {}).get("snapshot") or {}
            if snap.get("snapshot_id"):
                self.state.paddock_snapshot_id = snap["snapshot_id"]

    # --- exec ---

    def _prepare_exec_command(self, *command: str | Path, shell: bool | list[str], user: str | User | None) -> list[str]:
        # Paddock runs a command as another user natively (exec's `user`): no sudo prefix.
        return super()._prepare_exec_command(*command, shell=shell, user=None)

    async def exec(
        self,
        *command: str | Path,
        timeout: float | None = None,
        shell: bool | list[str] = True,
        user: str | User | None = None,
    ) -> ExecResult:
        argv = self._prepare_exec_command(*command, shell=shell, user=None)
        return await self._exec_argv(argv, timeout=timeout, user=user)

    async def _exec_internal(self, *command: str | Path, timeout: float | None = None) -> ExecResult:
        return await self._exec_argv([str(c) for c in command], timeout=timeout, user=None)

    async def _exec_argv(self, argv: list[str], *, timeout: float | None, user: str | User | None) -> ExecResult:
        args: dict[str, Any] = {"argv": argv}
        if timeout is not None:
            args["timeout_ms"] = max(1, math.ceil(timeout * 1000))
        if user is not None:
            args["user"] = user.name if isinstance(user, User) else str(user)
        wait = (timeout or 600.0) + self._timeout()
        try:
            res = await self._op(OP_EXEC, args, timeout=wait)
        except PaddockError as e:
            if isinstance(e, ExecTimeout):
                raise ExecTimeoutError(command=argv, timeout_s=timeout, cause=e) from e
            raise ExecTransportError(
                command=argv, cause=e, context={"paddock_error_code": e.code}, message=str(e), retryable=e.retryable
            ) from e
        return ExecResult(
            stdout=_decode_output(res.get("stdout"), res.get("stdout_encoding")),
            stderr=_decode_output(res.get("stderr"), res.get("stderr_encoding")),
            exit_code=int(res.get("exit_code", 0)),
        )

    # --- files ---

    async def read(self, path: Path, *, user: str | User | None = None) -> io.IOBase:
        if user is not None:
            await self._check_read_with_exec(path, user=user)
        target = self._path(path)
        try:
            res = await self._op(OP_READ, {"path": target}, timeout=WORKSPACE_TIMEOUT)
        except PaddockError as e:
            if isinstance(e, NotFound):
                raise WorkspaceReadNotFoundError(path=Path(path), cause=e) from e
            raise WorkspaceArchiveReadError(path=Path(path), cause=e, context={"paddock_error_code": e.code}, retryable=e.retryable) from e
        if not res.get("download"):
            return io.BytesIO(base64.b64decode(res.get("content") or ""))
        # Over the inline limit: the node put the file in a temporary object that the engine's
        # transfer service streams here (and deletes). Spooled: large files go to disk.
        out = tempfile.SpooledTemporaryFile(max_size=8 << 20)
        try:
            n = await self._t.download(res["download"], out)
        except PaddockError as e:
            out.close()
            raise WorkspaceArchiveReadError(path=Path(path), cause=e, retryable=e.retryable) from e
        if n != int(res.get("size", n)):
            out.close()
            raise WorkspaceArchiveReadError(path=Path(path), context={"reason": f"got {n} of {res.get('size')} bytes"}, retryable=True)
        out.seek(0)
        return out  # type: ignore[return-value]

    async def write(self, path: Path, data: io.IOBase, *, user: str | User | None = None) -> None:
        payload = coerce_write_payload(path=path, data=data)
        if user is not None:
            await self._check_write_with_exec(path, user=user)
        target = self._path(path, for_write=True)
        stream = payload.stream
        head = stream.read(INLINE_LIMIT + 1) or b""
        if isinstance(head, str):
            head = head.encode("utf-8")
        try:
            if len(head) <= INLINE_LIMIT:
                await self._op(OP_WRITE, {"path": target, "content": base64.b64encode(head).decode()})
                return

            def chunks() -> Any:
                yield bytes(head)
                while True:
                    b = stream.read(1 << 20)
                    if not b:
                        return
                    yield b.encode("utf-8") if isinstance(b, str) else bytes(b)

            name, size = await self._t.upload(chunks())
            try:
                await self._op(OP_WRITE, {"path": target, "upload": name, "size": size}, timeout=WORKSPACE_TIMEOUT)
            except PaddockError:
                await self._t.discard(name)
                raise
        except PaddockError as e:
            raise WorkspaceArchiveWriteError(path=Path(path), cause=e, context={"paddock_error_code": e.code}, retryable=e.retryable) from e

    async def ls(self, path: Path | str, *, user: str | User | None = None) -> list[FileEntry]:
        if user is not None:
            return await super().ls(path, user=user)
        target = self._path(path)
        out: list[FileEntry] = []
        args: dict[str, Any] = {"path": target}
        while True:
            try:
                res = await self._op(OP_LS, args)
            except PaddockError as e:
                # What the SDK's local provider raises for a failed listing.
                raise ExecNonZeroError(
                    ExecResult(stdout=b"", stderr=str(e).encode(), exit_code=1), command=("ls", target), cause=e
                ) from e
            for ent in res.get("entries") or []:
                kind = {"dir": EntryKind.DIRECTORY, "file": EntryKind.FILE, "symlink": EntryKind.SYMLINK}.get(ent.get("type"), EntryKind.OTHER)
                mode = int(ent.get("mode", 0)) | (stat.S_IFDIR if kind == EntryKind.DIRECTORY else 0)
                name = ent.get("name", "")
                full = target if name in ("", ".") else f"{target.rstrip('/')}/{name}"
                out.append(
                    FileEntry(path=full, permissions=Permissions.from_mode(mode), owner="", group="", size=int(ent.get("size", 0)), kind=kind)
                )
            if not res.get("next"):
                return out
            args = {"path": target, "after": res["next"]}

    async def rm(self, path: Path | str, *, recursive: bool = False, user: str | User | None = None) -> None:
        if user is not None:
            await self._check_rm_with_exec(path, recursive=recursive, user=user)
        target = self._path(path, for_write=True)
        try:
            # As the SDK's providers: recursive is `rm -rf` (a missing path is fine).
            await self._op(OP_RM, {"path": target, "recursive": recursive, "force": recursive})
        except PaddockError as e:
            if isinstance(e, NotFound):
                raise ExecNonZeroError(
                    ExecResult(stdout=b"", stderr=str(e).encode(), exit_code=1), command=("rm", "--", target), cause=e
                ) from e
            raise WorkspaceArchiveWriteError(path=Path(target), cause=e, context={"paddock_error_code": e.code}) from e

    async def mkdir(self, path: Path | str, *, parents: bool = False, user: str | User | None = None) -> None:
        if user is not None:
            await self._check_mkdir_with_exec(path, parents=parents, user=user)
        target = self._path(path, for_write=True)
        try:
            await self._op(OP_MKDIR, {"path": target, "parents": parents})
        except PaddockError as e:
            if isinstance(e, AlreadyExists):
                return  # as the SDK's local provider (exist_ok)
            raise WorkspaceArchiveWriteError(path=Path(target), cause=e, context={"paddock_error_code": e.code}) from e

    # --- workspace snapshots ---

    async def persist_workspace(self) -> io.IOBase:
        root = self.state.manifest.root
        try:
            res = await self._op(OP_PERSIST, timeout=WORKSPACE_TIMEOUT)
        except PaddockError as e:
            raise WorkspaceArchiveReadError(path=Path(root), cause=e, context={"paddock_error_code": e.code}, retryable=e.retryable) from e
        snap = res.get("snapshot") or {}
        self.state.paddock_snapshot_id = snap.get("snapshot_id") or self.state.paddock_snapshot_id
        # The SDK wants the tar itself, which a tenant cannot download from Paddock's store: tar
        # the workspace in the sandbox to a file in it (excluded from the tar, removed after) and
        # read that back (streamed through the transfer service when large).
        name = f".paddock-sdk-{uuid.uuid4().hex}.tar"
        path = f"{root.rstrip('/')}/{name}"
        # busybox tar (the base image) has no --exclude: the archive and the SDK's skip paths
        # are dropped from the tar here, member by member.
        argv = ["tar", "-cf", path, "-C", root, "."]
        result = await self._exec_argv(argv, timeout=WORKSPACE_TIMEOUT, user=None)
        try:
            if not result.ok():
                raise WorkspaceArchiveReadError(
                    path=Path(root), context={"command": argv, "stderr": result.stderr.decode("utf-8", "replace")}
                )
            raw = await self.read(Path(path))
        finally:
            try:
                await self._op(OP_RM, {"path": path, "force": True})
            except PaddockError:
                pass
        try:
            return _filter_tar(raw, skip={name, *(p.as_posix() for p in self._persist_workspace_skip_relpaths())})
        finally:
            raw.close()

    async def hydrate_workspace(self, data: io.IOBase) -> None:
        root = Path(self.state.manifest.root)

        def chunks() -> Any:
            while True:
                b = data.read(1 << 20)
                if not b:
                    return
                yield b.encode("utf-8") if isinstance(b, str) else bytes(b)

        try:
            name, _ = await self._t.upload(chunks())
            try:
                # Paddock checks the archive (archive rules) before it extracts anything, and
                # swaps the workspace only once the whole archive extracted.
                await self._op(OP_HYDRATE, {"upload": name}, timeout=WORKSPACE_TIMEOUT)
            except PaddockError:
                await self._t.discard(name)
                raise
        except PaddockError as e:
            raise WorkspaceArchiveWriteError(path=root, cause=e, context={"paddock_error_code": e.code}, retryable=e.retryable) from e

    # --- PTY: Paddock's interactive processes (proc_*) ---

    async def _resolve_exposed_port(self, port: int) -> ExposedPortEndpoint:
        """Paddock's port op: an address on the session's node that forwards to the port inside
        the sandbox (the sandbox itself keeps its network policy). It changes with the sandbox:
        after a stop and start, or a resume on another node, resolve it again."""
        try:
            res = await self._op(OP_PORT, {"port": port})
        except PaddockError as e:
            raise ExposedPortUnavailableError(
                port=port,
                exposed_ports=self.state.exposed_ports,
                reason="backend_unavailable",
                context={"backend": BACKEND_ID, "paddock_error_code": e.code, "detail": str(e)},
                cause=e,
                retryable=e.retryable,
            ) from e
        return ExposedPortEndpoint(host=str(res["host"]), port=int(res["port"]), tls=False)

    def supports_pty(self) -> bool:
        return True

    def _pty_update(self, res: dict[str, Any], max_output_tokens: int | None) -> PtyExecUpdate:
        from agents.sandbox.util.token_truncation import formatted_truncate_text_with_token_count

        raw = _decode_output(res.get("output"), res.get("output_encoding"))
        pid = int(res["process_id"])
        running = bool(res.get("running"))
        if not running:
            self._procs.discard(pid)
        text = raw.decode("utf-8", errors="replace")
        truncated, original = formatted_truncate_text_with_token_count(text, max_output_tokens)
        return PtyExecUpdate(
            process_id=pid if running else None,
            output=truncated.encode("utf-8"),
            exit_code=None if running else res.get("exit_code"),
            original_token_count=original,
        )

    async def pty_exec_start(
        self,
        *command: str | Path,
        timeout: float | None = None,
        shell: bool | list[str] = True,
        user: str | User | None = None,
        tty: bool = False,
        yield_time_s: float | None = None,
        max_output_tokens: int | None = None,
    ) -> PtyExecUpdate:
        _ = timeout
        argv = self._prepare_exec_command(*command, shell=shell, user=None)
        yield_ms = clamp_pty_yield_time_ms(10_000 if yield_time_s is None else int(yield_time_s * 1000))
        args: dict[str, Any] = {"argv": argv, "tty": tty, "yield_ms": yield_ms, "return_on_output": False}
        if user is not None:
            args["user"] = user.name if isinstance(user, User) else str(user)
        try:
            res = await self._op(OP_PROC_START, args, timeout=yield_ms / 1000 + self._timeout())
        except PaddockError as e:
            raise ExecTransportError(command=argv, cause=e, message=str(e), retryable=e.retryable) from e
        self._procs.add(int(res["process_id"]))
        return self._pty_update(res, max_output_tokens)

    async def pty_write_stdin(
        self,
        *,
        session_id: int,
        chars: str,
        yield_time_s: float | None = None,
        max_output_tokens: int | None = None,
    ) -> PtyExecUpdate:
        yield_ms = resolve_pty_write_yield_time_ms(
            yield_time_ms=250 if yield_time_s is None else int(yield_time_s * 1000), input_empty=not chars
        )
        args: dict[str, Any] = {"process_id": session_id, "yield_ms": yield_ms}
        op = OP_PROC_READ
        if chars:
            op = OP_PROC_WRITE
            args["input"] = base64.b64encode(chars.encode("utf-8")).decode()
        try:
            res = await self._op(op, args, timeout=yield_ms / 1000 + self._timeout())
        except PaddockError as e:
            if isinstance(e, NotFound):
                raise PtySessionNotFoundError(session_id=session_id, cause=e) from e
            raise
        return self._pty_update(res, max_output_tokens)

    async def pty_terminate_all(self) -> None:
        for pid in list(self._procs):
            try:
                await self._op(OP_PROC_SIGNAL, {"process_id": pid, "signal": "KILL"})
            except PaddockError:
                pass
            self._procs.discard(pid)


# How long resume keeps asking the scheduler while it answers a retryable error (a node that
# just died and is not yet known gone, one that just started, a racing writer): then it raises.
RESUME_RETRY_S = 60.0


async def _resume_placed(t: Transport, args: dict[str, Any]) -> Any:
    """Ask the engine's scheduler to resume a session no node serves. A retryable error (the
    contract's flag: unavailable, no_capacity, concurrency_conflict, ...) means the resume ran
    nothing, so it is asked again, each time as a new command, with backoff, for RESUME_RETRY_S."""
    give_up = asyncio.get_running_loop().time() + RESUME_RETRY_S
    wait = 0.2
    while True:
        try:
            return await t.request(t.tenant_subject(OP_RESUME), args, timeout=WORKSPACE_TIMEOUT, trace=_trace_ids())
        except PaddockError as e:
            if not e.retryable or asyncio.get_running_loop().time() + wait > give_up:
                raise
        await asyncio.sleep(wait)
        wait = min(2 * wait, 2.0)


class PaddockSandboxClient(BaseSandboxClient[PaddockSandboxClientOptions | None]):
    """Creates, resumes and deletes Paddock sessions for the SDK. One NATS connection per client,
    opened on first use in the running event loop; ``aclose()`` closes it."""

    backend_id = BACKEND_ID
    supports_default_options = True

    def __init__(
        self,
        options: PaddockSandboxClientOptions | None = None,
        *,
        instrumentation: Instrumentation | None = None,
        dependencies: Dependencies | None = None,
    ) -> None:
        super().__init__()
        self.options = options or PaddockSandboxClientOptions()
        self._instrumentation = instrumentation if instrumentation is not None else Instrumentation()
        self._dependencies = dependencies
        self._transport: Transport | None = None
        self._lock = asyncio.Lock()
        self._live: set[str] = set()  # Paddock session ids created or resumed and not deleted

    async def _connect(self, options: PaddockSandboxClientOptions) -> Transport:
        async with self._lock:
            if self._transport is not None and not self._transport.nc.is_closed:
                return self._transport
            nc, creds = await connect(options.url, options.creds)
            tenant = options.tenant or (creds.tenant if creds and creds.tenant else "default")
            self._transport = Transport(nc, tenant, actor="openai-agents")
            return self._transport

    async def aclose(self) -> None:
        """Close the client's NATS connection (sessions keep running in Paddock)."""
        if self._transport is not None and not self._transport.nc.is_closed:
            await self._transport.nc.close()
        self._transport = None

    async def create(
        self,
        *,
        snapshot: SnapshotSpec | SnapshotBase | None = None,
        manifest: Manifest | None = None,
        options: PaddockSandboxClientOptions | None = None,
    ) -> SandboxSession:
        opts = options or self.options
        manifest = manifest if manifest is not None else Manifest()
        self._validate_manifest_for_create(manifest)
        _check_manifest(manifest)
        t = await self._connect(opts)
        session_id = uuid.uuid4()
        state = PaddockSandboxSessionState(
            session_id=session_id,
            manifest=manifest,
            snapshot=resolve_snapshot(snapshot, str(session_id)),
            paddock_session_id=str(session_id),
            tenant=t.tenant,
            runtime=opts.runtime,
            exposed_ports=opts.exposed_ports,
            options=opts.model_dump(mode="json"),
        )
        await self._create_backend(t, state, opts)
        self._live.add(state.paddock_session_id)
        inner = PaddockSandboxSession(state=state, transport=t, secret_env=opts.secret_env)
        return self._wrap_session(inner, instrumentation=self._instrumentation)

    async def _create_backend(self, t: Transport, state: PaddockSandboxSessionState, opts: PaddockSandboxClientOptions) -> None:
        args = opts.create_args(session_id=state.paddock_session_id, workspace_root=state.manifest.root)
        res = await t.request(t.tenant_subject(OP_CREATE), args, timeout=opts.timeout_s, trace=_trace_ids())
        state.node = res.get("node")
        state.runtime = res.get("runtime") or state.runtime
        state.epoch = 1

    async def resume(self, state: SandboxSessionState) -> SandboxSession:
        """Reattach to the session's sandbox where it runs; if no node serves it, the engine's
        scheduler places it on a node that re-creates it from Paddock's last snapshot. A session
        Paddock no longer knows (deleted) is created again and the SDK restores its own snapshot."""
        if not isinstance(state, PaddockSandboxSessionState):
            raise TypeError("PaddockSandboxClient.resume expects a PaddockSandboxSessionState")
        opts = self.options
        if state.options and not (opts.url or opts.creds or opts.image):
            opts = PaddockSandboxClientOptions.model_validate({**state.options, "secret_env": self.options.secret_env})
        t = await self._connect(opts)
        sid = state.paddock_session_id
        args: dict[str, Any] = {}
        if opts.secret_env:
            args["secret_env"] = dict(opts.secret_env)
        preserved = True
        try:
            try:
                res = await t.request(
                    t.session_subject(sid, OP_RESUME), args, timeout=WORKSPACE_TIMEOUT, trace=_trace_ids(), fallback_no_responders=True
                )
            except NoRespondersError:
                res = await _resume_placed(t, {"session_id": sid, **args})
            state.node = res.get("node", state.node)
            state.epoch = int(res.get("epoch", state.epoch))
        except PaddockError as e:
            if not isinstance(e, (SessionNotFound, SnapshotNotFound)):
                raise
            if isinstance(e, SnapshotNotFound):
                # Never persisted in Paddock: bring it back empty; the SDK restores its snapshot.
                await t.request(t.tenant_subject(OP_RESUME), {"session_id": sid, "empty": True, **args}, timeout=WORKSPACE_TIMEOUT)
            else:
                state.paddock_session_id = str(uuid.uuid4())
                await self._create_backend(t, state, opts)
            preserved = False
            state.workspace_root_ready = False
        self._live.add(state.paddock_session_id)
        inner = PaddockSandboxSession(state=state, transport=t, secret_env=opts.secret_env)
        inner._set_start_state_preserved(preserved)
        return self._wrap_session(inner, instrumentation=self._instrumentation)

    async def fork(
        self,
        session: SandboxSession,
        n: int = 1,
        *,
        snapshot_id: str | None = None,
        at_seq: int | None = None,
        secret_env: dict[str, str] | None = None,
    ) -> list[SandboxSession]:
        """Fork ``session`` into ``n`` sessions (PaddockSandboxSession.fork), returned as this
        client's sessions: delete them with ``delete`` like any other."""
        inner = session._inner
        if not isinstance(inner, PaddockSandboxSession):
            raise TypeError("PaddockSandboxClient.fork expects a PaddockSandboxSession")
        children = await inner.fork(n, snapshot_id=snapshot_id, at_seq=at_seq, secret_env=secret_env)
        out: list[SandboxSession] = []
        for child in children:
            self._live.add(child.state.paddock_session_id)
            out.append(self._wrap_session(child, instrumentation=self._instrumentation))
        return out

    async def delete(self, session: SandboxSession) -> SandboxSession:
        inner = session._inner
        if not isinstance(inner, PaddockSandboxSession):
            raise TypeError("PaddockSandboxClient.delete expects a PaddockSandboxSession")
        try:
            await inner._op(OP_DELETE, timeout=WORKSPACE_TIMEOUT)
        except PaddockError as e:
            if not isinstance(e, SessionNotFound):
                raise
        self._live.discard(inner.state.paddock_session_id)
        if not self._live:
            # The client's last session is gone: close its connection, as the SDK's providers
            # hold nothing open after delete.
            await self.aclose()
        return session

    def deserialize_session_state(self, payload: dict[str, object]) -> SandboxSessionState:
        return self._deserialize_session_state_payload(payload, PaddockSandboxSessionState)


__all__ = [
    "PaddockSandboxClient",
    "PaddockSandboxClientOptions",
    "PaddockSandboxSession",
    "PaddockSandboxSessionState",
]
