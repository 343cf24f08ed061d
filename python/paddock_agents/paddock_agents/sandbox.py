"""PaddockSandboxClient and PaddockSandboxSession: the OpenAI Agents SDK's sandbox layer on Paddock,
built on the plain client ``paddock``.

Every SDK operation is one or more Paddock ops (create, exec, read, write, ls, rm, mkdir, running,
persist, hydrate, resume, stop, shutdown, delete, proc_*), so each lands in Paddock's audit stream,
carrying the SDK's trace id and span id when tracing is on (and the W3C trace context of
OpenTelemetry, when it is in use, as NATS headers).

Lifecycle, SDK call -> Paddock ops:

    client.create      -> create (the sandbox runs from here on)
    session.start      -> start when the sandbox is not running; the SDK then materialises the
                          manifest with write/mkdir (or restores its snapshot with hydrate)
    session.stop       -> persist (Paddock snapshot) + the SDK's tar (exec tar, read, rm)
    session.shutdown   -> shutdown; stop first (it persists) only when the workspace changed
                          since the last persist, so a Runner-owned session gets one snapshot
    client.resume      -> resume of the same Paddock session, on its node, else the scheduler's
                          resume (another node); a deleted session is re-created under a new id
                          whose create records the old one (label paddock.replaces)
    client.delete      -> delete
"""

from __future__ import annotations

import asyncio
import io
import os
import stat
import tarfile
import tempfile
import uuid
from pathlib import Path
from typing import Any, Literal

import paddock
from agents.sandbox.errors import (
    ExecNonZeroError,
    ExecTimeoutError,
    ExecTransportError,
    ExposedPortUnavailableError,
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
from nats.aio.client import Client as NatsClient
from paddock.contract import OP_RM, OP_RUNNING, OP_START
from paddock.errors import (
    AlreadyExists,
    ExecTimeout,
    InvalidState,
    NotFound,
    PaddockError,
    SessionNotFound,
    SnapshotNotFound,
    Unavailable,
)
from pydantic import ConfigDict, Field

DEFAULT_TIMEOUT = 60.0
WORKSPACE_TIMEOUT = 30 * 60.0

# The SDK's message for stdin on a process without a TTY (its providers raise it as RuntimeError;
# the SDK's write_stdin tool recognises it).
STDIN_NOT_AVAILABLE = "stdin is not available for this process"

BACKEND_ID = "paddock"


class PaddockSandboxClientOptions(BaseSandboxClientOptions):
    """What to create in Paddock: the sandbox only. Where Paddock is and who connects (URL,
    credentials, tenant, TLS CA, an existing connection) are the client's constructor arguments,
    never options, so they are never serialised with a session's state.

    Names follow the SDK's other providers where they mean the same (``image``,
    ``exposed_ports``, ``labels``: DockerSandboxClientOptions). ``image`` falls back to
    $PADDOCK_IMAGE, then the node's base image; ``runtime`` to $PADDOCK_RUNTIME, then the node's.
    ``secret_env`` values are given to the sandbox and never recorded by Paddock; they are not
    serialised with the options or the session state, so pass them again to a client that
    resumes a session whose sandbox must be re-created. ``login_shell``: what ``shell=True``
    runs, ``sh -lc`` (the SDK's default) or ``sh -c`` (default here: a login shell costs tens of
    milliseconds per command reading the profile); an explicit shell list is sent as it is.
    """

    # Unknown fields are refused: url, creds and tenant moved to the client's constructor.
    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True, extra="forbid")

    type: Literal["paddock"] = "paddock"
    image: str | None = None
    exposed_ports: tuple[int, ...] = ()
    labels: dict[str, str] = Field(default_factory=dict)
    runtime: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    secret_env: dict[str, str] = Field(default_factory=dict, exclude=True, repr=False)
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
    # network_allow (contract 1.4): the only destinations the sandbox may reach, through the
    # node's egress proxy ("host[:port]", "*.domain[:port]", "IP[:port]", "CIDR"); the Docker
    # runtime enforces it, the local one refuses it. Empty: network decides (none by default).
    network_allow: tuple[str, ...] = ()
    login_shell: bool = False

    def __init__(self, image: str | None = None, exposed_ports: tuple[int, ...] = (), **kw: Any) -> None:
        super().__init__(image=image, exposed_ports=tuple(dict.fromkeys(int(p) for p in exposed_ports)), **kw)

    def create_kwargs(self) -> dict[str, Any]:
        """paddock.Client.create's arguments for these options (environment defaults applied)."""
        kw: dict[str, Any] = {
            "image": self.image or os.environ.get("PADDOCK_IMAGE") or None,
            "runtime": self.runtime or os.environ.get("PADDOCK_RUNTIME") or None,
        }
        for key in ("cpus", "memory_bytes", "disk_bytes", "pids_limit", "lifetime_s", "idle_timeout_s", "max_processes", "network", "user"):
            kw[key] = getattr(self, key)
        for key in ("env", "secret_env", "labels", "node_labels"):
            kw[key] = dict(getattr(self, key)) or None
        kw["exposed_ports"] = self.exposed_ports
        kw["network_allow"] = self.network_allow
        return kw


class PaddockSandboxSessionState(SandboxSessionState):
    """The SDK's session state plus where the session lives in Paddock (no secrets, no
    connection settings: no URL, credentials or file paths)."""

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
    # paddock_replaces: the Paddock session this one re-created after it was deleted (resume),
    # also recorded in its create's labels as paddock.replaces.
    paddock_replaces: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)


def _trace() -> paddock.Trace | None:
    """The SDK's current trace id and span id, for Paddock's trace_id and parent_span_id (the W3C
    headers come from OpenTelemetry, when the application uses it, in paddock itself)."""
    trace = get_current_trace()
    if trace is None or trace.export() is None:
        return None
    span = get_current_span()
    return paddock.Trace(trace_id=trace.trace_id, parent_span_id=span.span_id if span is not None else None)


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
    """One Paddock session (a ``paddock.Session``). Paths are the SDK's workspace paths, sent as
    absolute paths under the manifest root (Paddock's workspace root), which Paddock confines
    again on the node."""

    state: PaddockSandboxSessionState

    def __init__(self, *, state: PaddockSandboxSessionState, session: paddock.Session, secret_env: dict[str, str] | None = None,
                 login_shell: bool = False) -> None:
        self.state = state
        self._s = session
        self._secret_env = dict(secret_env or {})
        self._login_shell = login_shell
        self._procs: dict[int, bool] = {}  # live process id -> tty
        # Whether the workspace may differ from its last Paddock snapshot: shutdown persists
        # (through stop) only then, so a Runner-owned session is snapshotted once.
        self._dirty = True

    # --- plumbing ---

    @property
    def paddock_session_id(self) -> str:
        """The session's id in Paddock."""
        return self.state.paddock_session_id

    @property
    def paddock(self) -> paddock.Session:
        """The plain client's session (paddock.Session) behind this one."""
        return self._s

    async def _op(self, op: str, args: Any = None, *, timeout: float | None = None) -> Any:
        return await self._s._op(op, args, timeout=timeout, trace=_trace())

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
        secrets = dict(self._secret_env if secret_env is None else secret_env)
        kids = await self._s.client.fork(self.state.paddock_session_id, n, snapshot_id=snapshot_id, at_seq=at_seq,
                                         secret_env=secrets or None, trace=_trace())
        children: list[PaddockSandboxSession] = []
        for kid in kids:
            state = self.state.model_copy(
                deep=True,
                update={
                    "session_id": uuid.UUID(kid.id),
                    "paddock_session_id": kid.id,
                    "paddock_parent": dict(kid.parent or {}),
                    "paddock_snapshot_id": None,
                    "paddock_replaces": None,
                    "node": None,
                    "epoch": 1,
                },
            )
            children.append(PaddockSandboxSession(state=state, session=kid, secret_env=secrets, login_shell=self._login_shell))
        return children

    # --- lifecycle ---

    async def provision_manifest_accounts(self) -> None:
        _check_manifest(self.state.manifest)

    async def _ensure_backend_started(self) -> None:
        try:
            if not await self.running():
                await self._op(OP_START, timeout=WORKSPACE_TIMEOUT)
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
        # Best effort, as the SDK asks. stop persists the workspace (a Paddock snapshot that a later
        # resume, on any node, restores) and is sent only when the workspace may have changed since
        # the last persist: a Runner-owned session was just persisted by the SDK's stop(), and gets
        # no second snapshot. shutdown then removes the sandbox (it persists nothing).
        if self._dirty:
            try:
                snap = await self._s.stop()
                if snap.get("snapshot_id"):
                    self.state.paddock_snapshot_id = snap["snapshot_id"]
                self._dirty = False
            except PaddockError:
                pass
        try:
            await self._s.shutdown()
        except PaddockError:
            pass
        self._procs.clear()

    # --- exec ---

    def _prepare_exec_command(self, *command: str | Path, shell: bool | list[str], user: str | User | None) -> list[str]:
        # Paddock runs a command as another user natively (exec's `user`): no sudo prefix. The
        # SDK's shell=True is `sh -lc`; a login shell reads the profile on every command, so it
        # is `sh -c` here unless the options ask for login_shell (an explicit list is kept).
        argv = super()._prepare_exec_command(*command, shell=shell, user=None)
        if shell is True and not self._login_shell and argv[:2] == ["sh", "-lc"]:
            argv[1] = "-c"
        return argv

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
        self._dirty = True
        try:
            res = await self._s.exec(argv, timeout=timeout, user=(user.name if isinstance(user, User) else user) or None, trace=_trace())
        except PaddockError as e:
            if isinstance(e, ExecTimeout):
                raise ExecTimeoutError(command=argv, timeout_s=timeout, cause=e) from e
            raise ExecTransportError(
                command=argv, cause=e, context={"paddock_error_code": e.code}, message=str(e), retryable=e.retryable
            ) from e
        return ExecResult(stdout=res.stdout, stderr=res.stderr, exit_code=res.exit_code)

    # --- files ---

    async def read(self, path: Path, *, user: str | User | None = None) -> io.IOBase:
        if user is not None:
            await self._check_read_with_exec(path, user=user)
        target = self._path(path)
        # Spooled: large files (through the transfer service) go to disk.
        out = tempfile.SpooledTemporaryFile(max_size=8 << 20)
        try:
            await self._s.read_to(target, out)
        except PaddockError as e:
            out.close()
            if isinstance(e, NotFound):
                raise WorkspaceReadNotFoundError(path=Path(path), cause=e) from e
            raise WorkspaceArchiveReadError(path=Path(path), cause=e, context={"paddock_error_code": e.code}, retryable=e.retryable) from e
        out.seek(0)
        return out  # type: ignore[return-value]

    async def write(self, path: Path, data: io.IOBase, *, user: str | User | None = None) -> None:
        payload = coerce_write_payload(path=path, data=data)
        if user is not None:
            await self._check_write_with_exec(path, user=user)
        target = self._path(path, for_write=True)
        self._dirty = True
        try:
            await self._s.write(target, payload.stream)  # type: ignore[arg-type]
        except PaddockError as e:
            raise WorkspaceArchiveWriteError(path=Path(path), cause=e, context={"paddock_error_code": e.code}, retryable=e.retryable) from e

    async def ls(self, path: Path | str, *, user: str | User | None = None) -> list[FileEntry]:
        if user is not None:
            return await super().ls(path, user=user)
        target = self._path(path)
        try:
            entries = await self._s.ls(target)
        except PaddockError as e:
            # What the SDK's local provider raises for a failed listing.
            raise ExecNonZeroError(ExecResult(stdout=b"", stderr=str(e).encode(), exit_code=1), command=("ls", target), cause=e) from e
        out: list[FileEntry] = []
        for ent in entries:
            kind = {"dir": EntryKind.DIRECTORY, "file": EntryKind.FILE, "symlink": EntryKind.SYMLINK}.get(ent.type, EntryKind.OTHER)
            mode = ent.mode | (stat.S_IFDIR if kind == EntryKind.DIRECTORY else 0)
            out.append(FileEntry(path=ent.path, permissions=Permissions.from_mode(mode), owner="", group="", size=ent.size, kind=kind))
        return out

    async def rm(self, path: Path | str, *, recursive: bool = False, user: str | User | None = None) -> None:
        if user is not None:
            await self._check_rm_with_exec(path, recursive=recursive, user=user)
        target = self._path(path, for_write=True)
        self._dirty = True
        try:
            # As the SDK's providers: recursive is `rm -rf` (a missing path is fine).
            await self._s.rm(target, recursive=recursive, force=recursive)
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
        self._dirty = True
        try:
            await self._s.mkdir(target, parents=parents)
        except PaddockError as e:
            if isinstance(e, AlreadyExists):
                return  # as the SDK's local provider (exist_ok)
            raise WorkspaceArchiveWriteError(path=Path(target), cause=e, context={"paddock_error_code": e.code}) from e

    # --- workspace snapshots ---

    async def persist_workspace(self) -> io.IOBase:
        root = self.state.manifest.root
        try:
            snap = await self._s.persist()
        except PaddockError as e:
            raise WorkspaceArchiveReadError(path=Path(root), cause=e, context={"paddock_error_code": e.code}, retryable=e.retryable) from e
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
                await self._s.rm(path, force=True)
            except PaddockError:
                pass
        try:
            out = _filter_tar(raw, skip={name, *(p.as_posix() for p in self._persist_workspace_skip_relpaths())})
        finally:
            raw.close()
        # The tar file made above is gone again: the workspace is the snapshot just recorded.
        self._dirty = False
        return out

    async def hydrate_workspace(self, data: io.IOBase) -> None:
        root = Path(self.state.manifest.root)
        self._dirty = True
        try:
            # Paddock checks the archive (archive rules) before it extracts anything, and swaps
            # the workspace only once the whole archive extracted.
            await self._s.hydrate(data)  # type: ignore[arg-type]
        except PaddockError as e:
            raise WorkspaceArchiveWriteError(path=root, cause=e, context={"paddock_error_code": e.code}, retryable=e.retryable) from e

    # --- PTY: Paddock's interactive processes (proc_*) ---

    async def _resolve_exposed_port(self, port: int) -> ExposedPortEndpoint:
        """Paddock's port op: an address on the session's node that forwards to the port inside
        the sandbox (the sandbox itself keeps its network policy). It changes with the sandbox:
        after a stop and start, or a resume on another node, resolve it again."""
        try:
            ep = await self._s.port(port)
        except PaddockError as e:
            raise ExposedPortUnavailableError(
                port=port,
                exposed_ports=self.state.exposed_ports,
                reason="backend_unavailable",
                context={"backend": BACKEND_ID, "paddock_error_code": e.code, "detail": str(e)},
                cause=e,
                retryable=e.retryable,
            ) from e
        return ExposedPortEndpoint(host=ep.host, port=ep.port, tls=False)

    def supports_pty(self) -> bool:
        return True

    def _pty_update(self, out: paddock.ProcOutput, max_output_tokens: int | None) -> PtyExecUpdate:
        from agents.sandbox.util.token_truncation import formatted_truncate_text_with_token_count

        if not out.running:
            self._procs.pop(out.process_id, None)
        text = out.output.decode("utf-8", errors="replace")
        truncated, original = formatted_truncate_text_with_token_count(text, max_output_tokens)
        return PtyExecUpdate(
            process_id=out.process_id if out.running else None,
            output=truncated.encode("utf-8"),
            exit_code=None if out.running else out.exit_code,
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
        self._dirty = True
        try:
            proc, out = await self._s.start_process(argv, tty=tty, user=(user.name if isinstance(user, User) else user) or None,
                                                    yield_s=yield_ms / 1000)
        except PaddockError as e:
            raise ExecTransportError(command=argv, cause=e, message=str(e), retryable=e.retryable) from e
        self._procs[proc.id] = tty
        return self._pty_update(out, max_output_tokens)

    async def pty_write_stdin(
        self,
        *,
        session_id: int,
        chars: str,
        yield_time_s: float | None = None,
        max_output_tokens: int | None = None,
    ) -> PtyExecUpdate:
        # As the SDK's providers: a process this session does not hold (never started here,
        # ended, or terminated by pty_terminate_all/stop) is not found at once, without a request.
        if session_id not in self._procs:
            raise PtySessionNotFoundError(session_id=session_id)
        tty = self._procs[session_id]
        if chars and not tty:
            raise RuntimeError(STDIN_NOT_AVAILABLE)
        yield_ms = resolve_pty_write_yield_time_ms(
            yield_time_ms=250 if yield_time_s is None else int(yield_time_s * 1000), input_empty=not chars
        )
        proc = self._s.process(session_id, tty=tty)
        try:
            if chars:
                self._dirty = True
                out = await proc.write(chars, yield_s=yield_ms / 1000)
            else:
                out = await proc.read(yield_s=yield_ms / 1000)
        except PaddockError as e:
            if isinstance(e, NotFound):
                self._procs.pop(session_id, None)
                raise PtySessionNotFoundError(session_id=session_id, cause=e) from e
            raise
        return self._pty_update(out, max_output_tokens)

    async def pty_terminate_all(self) -> None:
        procs, self._procs = list(self._procs), {}
        for pid in procs:
            try:
                await self._s.process(pid).signal("KILL")
            except PaddockError:
                pass


class PaddockSandboxClient(BaseSandboxClient[PaddockSandboxClientOptions | None]):
    """Creates, resumes and deletes Paddock sessions for the SDK.

    Connection settings are the constructor's, each falling back to its environment variable:
    ``url`` ($PADDOCK_URL), ``creds`` ($PADDOCK_CREDS: a credentials file or an nkey seed file),
    ``tenant`` ($PADDOCK_TENANT, else the credentials'), ``tls_ca`` ($PADDOCK_TLS_CA); or an
    existing connection: ``nc`` (a nats.py client) or ``client`` (a ``paddock.Client``), which
    ``aclose()`` then leaves open. ``PaddockSandboxClient()`` with no arguments works from the
    environment alone (and $PADDOCK_IMAGE for the image). One NATS connection per client, opened
    on first use in the running event loop.
    """

    backend_id = BACKEND_ID
    supports_default_options = True

    def __init__(
        self,
        options: PaddockSandboxClientOptions | None = None,
        *,
        url: str | None = None,
        creds: str | None = None,
        tenant: str | None = None,
        tls_ca: str | None = None,
        nc: NatsClient | None = None,
        client: paddock.Client | None = None,
        timeout_s: float = DEFAULT_TIMEOUT,
        instrumentation: Instrumentation | None = None,
        dependencies: Dependencies | None = None,
    ) -> None:
        super().__init__()
        self.options = options or PaddockSandboxClientOptions()
        self._conn = {"url": url, "creds": creds, "tenant": tenant, "tls_ca": tls_ca, "nc": nc}
        self._timeout = timeout_s
        self._instrumentation = instrumentation if instrumentation is not None else Instrumentation()
        self._dependencies = dependencies
        self._client: paddock.Client | None = client
        self._given = client is not None
        self._lock: asyncio.Lock | None = None
        self._live: set[str] = set()  # Paddock session ids created or resumed and not deleted

    async def _paddock(self) -> paddock.Client:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._client is not None and (self._given or not self._client.is_closed):
                return self._client
            # Every request carries the SDK's current trace and span (its ops' spans parent
            # Paddock's events).
            self._client = await paddock.connect(**self._conn, actor="openai-agents", name="paddock-agents", timeout=self._timeout,
                                                 trace=_trace)
            return self._client

    async def aclose(self) -> None:
        """Close the client's NATS connection when it opened it (sessions keep running in Paddock)."""
        if self._client is not None and not self._given:
            await self._client.close()
            self._client = None

    def _session(self, state: PaddockSandboxSessionState, s: paddock.Session, opts: PaddockSandboxClientOptions) -> PaddockSandboxSession:
        return PaddockSandboxSession(state=state, session=s, secret_env=opts.secret_env, login_shell=opts.login_shell)

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
        c = await self._paddock()
        session_id = uuid.uuid4()
        state = PaddockSandboxSessionState(
            session_id=session_id,
            manifest=manifest,
            snapshot=resolve_snapshot(snapshot, str(session_id)),
            paddock_session_id=str(session_id),
            tenant=c.tenant,
            runtime=opts.runtime,
            exposed_ports=tuple(dict.fromkeys(opts.exposed_ports)),
            options=opts.model_dump(mode="json"),
        )
        s = await self._create_backend(c, state, opts)
        self._live.add(state.paddock_session_id)
        return self._wrap_session(self._session(state, s, opts), instrumentation=self._instrumentation)

    async def _create_backend(self, c: paddock.Client, state: PaddockSandboxSessionState, opts: PaddockSandboxClientOptions,
                              labels: dict[str, str] | None = None) -> paddock.Session:
        kw = opts.create_kwargs()
        if labels:
            kw["labels"] = {**(kw.get("labels") or {}), **labels}
        root = state.manifest.root
        s = await c.create(session_id=state.paddock_session_id, workspace_root=root if root != "/workspace" else None,
                           trace=_trace(), **kw)
        state.node = s.node or None
        state.runtime = s.runtime or state.runtime
        state.epoch = 1
        return s

    async def resume(self, state: SandboxSessionState) -> SandboxSession:
        """Resume the same Paddock session: on the node that serves it, else through the engine's
        scheduler, which re-creates its sandbox on a node from Paddock's last snapshot. A session
        never persisted in Paddock comes back empty (the SDK restores its own snapshot). Only a
        session Paddock no longer knows (deleted) is created again, under a new id whose create
        records the old one (label ``paddock.replaces``, state ``paddock_replaces``)."""
        if not isinstance(state, PaddockSandboxSessionState):
            raise TypeError("PaddockSandboxClient.resume expects a PaddockSandboxSessionState")
        opts = self.options
        if state.options:
            saved = {k: v for k, v in state.options.items() if k in PaddockSandboxClientOptions.model_fields}
            opts = PaddockSandboxClientOptions.model_validate({**saved, "secret_env": self.options.secret_env})
        c = await self._paddock()
        sid = state.paddock_session_id
        secrets = dict(opts.secret_env) or None
        preserved = True
        try:
            s = await c.resume(sid, secret_env=secrets, trace=_trace())
            state.node = s.node or state.node
            state.epoch = s.epoch or state.epoch
        except PaddockError as e:
            if not isinstance(e, (SessionNotFound, SnapshotNotFound)):
                raise
            if isinstance(e, SnapshotNotFound):
                # Never persisted in Paddock: the same session, empty; the SDK restores its snapshot.
                s = await c.resume(sid, secret_env=secrets, empty=True, trace=_trace())
                state.node, state.epoch = s.node or state.node, s.epoch or state.epoch
            else:
                state.paddock_replaces = sid
                state.paddock_session_id = str(uuid.uuid4())
                s = await self._create_backend(c, state, opts, labels={"paddock.replaces": sid})
            preserved = False
            state.workspace_root_ready = False
        self._live.add(state.paddock_session_id)
        inner = self._session(state, s, opts)
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
            await inner.paddock.delete()
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
