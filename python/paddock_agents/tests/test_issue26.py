"""Issue 26's provider defects, each against a real engine: no-argument client, no connection
settings in saved state, duplicate exposed ports, ls of a file or symlink, terminated processes,
stdin without a TTY, one snapshot per Runner-style stop+shutdown, sh -c for shell commands, and
resume keeping the Paddock session."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from agents.sandbox import LocalSnapshotSpec
from agents.sandbox.errors import PtySessionNotFoundError
from agents.sandbox.files import EntryKind

import paddock
from paddock_agents import PaddockSandboxClient, PaddockSandboxClientOptions
from paddock_agents.sandbox import STDIN_NOT_AVAILABLE


async def _admin_events(session_id: str) -> list[dict]:
    admin = await paddock.connect(creds=os.environ["PADDOCK_ADMIN_CREDS"])
    try:
        return await admin.export(session_id)
    finally:
        await admin.close()


async def test_no_argument_client_and_state_without_connection_settings(options: PaddockSandboxClientOptions) -> None:
    client = PaddockSandboxClient()  # PADDOCK_URL, PADDOCK_CREDS, PADDOCK_IMAGE from the environment
    session = await client.create()
    try:
        await session.start()
        dumped = json.dumps(client.serialize_session_state(session.state))
        for secret in (os.environ["PADDOCK_URL"], os.environ["PADDOCK_CREDS"], os.path.dirname(os.environ["PADDOCK_CREDS"])):
            assert secret not in dumped
        for key in ('"url"', '"creds"', '"tls_ca"', '"tenant_creds"'):
            assert key not in dumped
        state = json.loads(dumped)
        assert state["options"]["image"] is None  # taken from PADDOCK_IMAGE at create, not saved
        res = await session.exec("python3 -c 'print(1)'")
        assert res.stdout == b"1\n"  # the Python image: PADDOCK_IMAGE was used
        with pytest.raises(ValueError):  # moved to the client's constructor
            PaddockSandboxClientOptions(url="nats://x")  # type: ignore[call-arg]
    finally:
        await client.delete(session)


def test_options_refuse_connection_settings() -> None:
    for bad in ({"url": "nats://x"}, {"creds": "/x.creds"}, {"tenant": "t"}):
        with pytest.raises(ValueError):
            PaddockSandboxClientOptions.model_validate(bad)


async def test_duplicate_exposed_ports_are_sent_once(options: PaddockSandboxClientOptions) -> None:
    client = PaddockSandboxClient(options.model_copy(update={"exposed_ports": (8080, 8080, 8081)}))
    session = await client.create()
    try:
        assert session.state.exposed_ports == (8080, 8081)
        [create] = [e for e in await _admin_events(session.state.paddock_session_id) if e["op"] == "create" and e["phase"] == "start"]
        assert sorted(create["data"]["exposed_ports"]) == [8080, 8081], create["data"]
        ep = await session.resolve_exposed_port(8080)
        assert ep.port > 0
    finally:
        await client.delete(session)


async def test_ls_of_a_file_or_symlink_is_that_path(client: PaddockSandboxClient) -> None:
    session = await client.create()
    try:
        await session.start()
        await session.write(Path("plain.txt"), io.BytesIO(b"x"))
        assert (await session.exec("ln -s plain.txt link")).ok()
        [f] = await session.ls("plain.txt")
        assert (f.path, f.kind) == ("/workspace/plain.txt", EntryKind.FILE)
        [ln] = await session.ls("link")
        assert (ln.path, ln.kind) == ("/workspace/link", EntryKind.SYMLINK)
        paths = {e.path for e in await session.ls(".")}
        assert {"/workspace/plain.txt", "/workspace/link"} <= paths
    finally:
        await client.delete(session)


async def test_processes_after_terminate_and_stdin_without_tty(client: PaddockSandboxClient) -> None:
    session = await client.create()
    try:
        await session.start()
        piped = await session.pty_exec_start("cat", shell=False, tty=False, yield_time_s=0.2)
        assert piped.process_id is not None
        with pytest.raises(RuntimeError) as err:
            await session.pty_write_stdin(session_id=piped.process_id, chars="x\n")
        assert str(err.value) == STDIN_NOT_AVAILABLE  # what the SDK's write_stdin tool looks for
        # Polling a piped process (no input) is fine.
        await session.pty_write_stdin(session_id=piped.process_id, chars="", yield_time_s=0.1)
        tty = await session.pty_exec_start("cat", shell=False, tty=True, yield_time_s=0.2)
        await session.pty_terminate_all()
        for pid in (piped.process_id, tty.process_id):
            with pytest.raises(PtySessionNotFoundError):
                await session.pty_write_stdin(session_id=pid, chars="")
        with pytest.raises(PtySessionNotFoundError):
            await session.pty_write_stdin(session_id=424242, chars="x")
    finally:
        await client.delete(session)


async def test_stop_then_shutdown_records_one_snapshot(client: PaddockSandboxClient, tmp_path: Path) -> None:
    # As a Runner-owned session with a snapshot spec: the SDK's stop() persists, then shutdown().
    session = await client.create(snapshot=LocalSnapshotSpec(base_path=tmp_path))
    try:
        await session.start()
        await session.write(Path("a.txt"), io.BytesIO(b"a"))
        await session.stop()  # the SDK's: persist (and its tar)
        await session.shutdown()  # nothing changed since: no stop, no second snapshot
        ops = [e["op"] for e in await _admin_events(session.state.paddock_session_id) if e["phase"] == "finish"]
        assert ops.count("persist") == 1 and "stop" not in ops and ops.count("shutdown") == 1, ops
    finally:
        await client.delete(session)
    # Without a snapshot spec the SDK's stop() persists nothing: shutdown persists once (stop).
    session = await client.create()
    try:
        await session.start()
        await session.write(Path("b.txt"), io.BytesIO(b"b"))
        await session.stop()
        await session.shutdown()
        ops = [e["op"] for e in await _admin_events(session.state.paddock_session_id) if e["phase"] == "finish"]
        assert ops.count("stop") == 1 and "persist" not in ops, ops
    finally:
        await client.delete(session)


async def test_shell_commands_are_sh_c_unless_login(options: PaddockSandboxClientOptions) -> None:
    client = PaddockSandboxClient(options)
    session = await client.create()
    try:
        await session.start()
        inner = session._inner
        assert inner._prepare_exec_command("echo hi", shell=True, user=None) == ["sh", "-c", "echo hi"]
        assert inner._prepare_exec_command("echo hi", shell=["bash", "-lc"], user=None) == ["bash", "-lc", "echo hi"]
        assert inner._prepare_exec_command("echo", "a b", shell=False, user=None) == ["echo", "a b"]
        await session.exec("echo hi")
        argvs = [e["data"].get("argv") for e in await _admin_events(inner.state.paddock_session_id)
                 if e["op"] == "exec" and e["phase"] == "start" and e.get("data")]
        assert ["sh", "-c", "echo hi"] in argvs, argvs
    finally:
        await client.delete(session)
    login = PaddockSandboxClient(options.model_copy(update={"login_shell": True}))
    session = await login.create()
    try:
        assert session._inner._prepare_exec_command("echo hi", shell=True, user=None) == ["sh", "-lc", "echo hi"]
    finally:
        await login.delete(session)


async def test_resume_keeps_the_paddock_session(options: PaddockSandboxClientOptions) -> None:
    first = PaddockSandboxClient(options)
    session = await first.create()
    await session.start()
    await session.write(Path("kept.txt"), io.BytesIO(b"kept"))
    await session.stop()
    await session.shutdown()
    payload = first.serialize_session_state(session.state)
    sid = session.state.paddock_session_id
    await first.aclose()

    second = PaddockSandboxClient()  # a new process's client, from the environment
    resumed = await second.resume(second.deserialize_session_state(payload))
    try:
        assert resumed.state.paddock_session_id == sid
        await resumed.start()
        assert (await resumed.read(Path("kept.txt"))).read() == b"kept"
        payload = second.serialize_session_state(resumed.state)
        await second.delete(resumed)

        # Deleted: a new session is unavoidable; its create records the one it replaces.
        third = PaddockSandboxClient()
        again = await third.resume(third.deserialize_session_state(payload))
        try:
            new_id = again.state.paddock_session_id
            assert new_id != sid and again.state.paddock_replaces == sid
            [create] = [e for e in await _admin_events(new_id) if e["op"] == "create" and e["phase"] == "start"]
            assert create["data"]["labels"]["paddock.replaces"] == sid, create["data"]
        finally:
            await third.delete(again)
    finally:
        await second.aclose()
