"""Files, large files both ways, and the SDK's typed errors, through the SDK's public API."""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path

import pytest
from agents.sandbox import Manifest
from agents.sandbox.entries import Dir, File
from agents.sandbox.errors import (
    ExecNonZeroError,
    ExecTimeoutError,
    InvalidManifestPathError,
    WorkspaceArchiveReadError,
    WorkspaceReadNotFoundError,
)

from paddock_agents import PaddockError, PaddockSandboxClient, PaddockSandboxClientOptions
from paddock.errors import InvalidPath


async def test_manifest_files_and_large_files(client: PaddockSandboxClient) -> None:
    manifest = Manifest(entries={"README.md": File(content=b"hello\n"), "data": Dir(children={"a.txt": File(content=b"a")})})
    session = await client.create(manifest=manifest)
    try:
        async with session:
            assert (await session.read(Path("README.md"))).read() == b"hello\n"
            assert (await session.read(Path("data/a.txt"))).read() == b"a"
            # 3 MiB up (chunked upload through the transfer service) and down (a download).
            big = os.urandom(3 * 1024 * 1024 + 17)
            await session.write(Path("deep/dir/big.bin"), io.BytesIO(big))
            got = (await session.read(Path("deep/dir/big.bin"))).read()
            assert len(got) == len(big) and got == big
            res = await session.exec("sha256sum deep/dir/big.bin")
            assert res.ok() and res.stdout.decode().split()[0] == hashlib.sha256(big).hexdigest()
            names = {Path(e.path).name: e for e in await session.ls("deep/dir")}
            assert set(names) == {"big.bin"} and names["big.bin"].size == len(big)
            assert not names["big.bin"].is_dir()
            res = await session.exec("python3 -c 'import sys; print(sys.version_info[0])'")
            assert res.ok() and res.stdout == b"3\n", res.stderr
    finally:
        await client.delete(session)


async def test_typed_errors(client: PaddockSandboxClient) -> None:
    session = await client.create(manifest=Manifest())
    try:
        async with session:
            with pytest.raises(WorkspaceReadNotFoundError):
                await session.read(Path("missing.txt"))
            with pytest.raises(InvalidManifestPathError):
                await session.read(Path("../etc/passwd"))
            with pytest.raises(InvalidManifestPathError):
                await session.read(Path("/etc/passwd"))
            # A symlink out of the workspace: the SDK's lexical check passes it, Paddock refuses it.
            assert (await session.exec("ln -s /etc/passwd escape")).ok()
            with pytest.raises(WorkspaceArchiveReadError) as err:
                await session.read(Path("escape"))
            assert err.value.context.get("paddock_error_code") == "invalid_path"
            assert isinstance(err.value.__cause__, InvalidPath)
            with pytest.raises(ExecTimeoutError):
                await session.exec("sleep 30", timeout=0.5)
            res = await session.exec("echo out; echo err >&2; exit 3")
            assert (res.exit_code, res.stdout, res.stderr) == (3, b"out\n", b"err\n")
            with pytest.raises(ExecNonZeroError):
                await session.rm("nothing-here")
            await session.rm("nothing-here", recursive=True)  # rm -rf: fine
            await session.mkdir("d/e", parents=True)
            await session.mkdir("d/e", parents=True)
            await session.rm("d", recursive=True)
            assert [e for e in await session.ls(".") if Path(e.path).name == "d"] == []
            # Paddock's policy refuses root (what the SDK's user= asks by name).
            res = await session.exec("id -u", user="nobody")
            assert res.ok() and res.stdout == b"65534\n"
            with pytest.raises(Exception) as err:
                await session.exec("id -u", user="root")
            assert "policy_denied" in str(err.value)
    finally:
        await client.delete(session)


async def test_pty_over_processes(client: PaddockSandboxClient) -> None:
    session = await client.create(manifest=Manifest())
    try:
        async with session:
            assert session.supports_pty()
            pty = await session.pty_exec_start(
                "sh", "-c", "printf 'ready\\n'; while IFS= read -r line; do printf 'got:%s\\n' \"$line\"; done",
                shell=False, tty=True, yield_time_s=1,
            )
            assert pty.process_id is not None and b"ready" in pty.output
            update = await session.pty_write_stdin(session_id=pty.process_id, chars="hello pty\n", yield_time_s=1)
            assert b"got:hello pty" in update.output and update.exit_code is None
            done = await session.pty_exec_start("sh", "-c", "exit 7", shell=False, yield_time_s=2)
            assert done.process_id is None and done.exit_code == 7
    finally:
        await client.delete(session)


async def test_credentials_are_required(options: PaddockSandboxClientOptions) -> None:
    client = PaddockSandboxClient(options, creds="none")
    with pytest.raises(PaddockError) as err:
        await client.create()
    assert err.value.code == "permission_denied"


async def test_unsupported_manifest_refused_before_create(client: PaddockSandboxClient) -> None:
    from agents.sandbox.types import User

    with pytest.raises(ValueError, match="users or groups"):
        await client.create(manifest=Manifest(users=[User(name="alice")]))
