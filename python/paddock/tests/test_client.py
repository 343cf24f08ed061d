"""The client against a real engine: commands, files, processes, ports, lifecycle, fork, events."""

from __future__ import annotations

import asyncio
import os

import pytest

import paddock
from paddock.errors import InvalidPath, InvalidRequest, NotFound, PaddockError, SessionNotFound


async def test_exec_and_shell(sess: paddock.Session) -> None:
    res = await sess.exec(["sh", "-c", "echo out; echo err >&2; exit 3"], env={"X": "1"})
    assert (res.exit_code, res.stdout, res.stderr, res.ok) == (3, b"out\n", b"err\n", False)
    res = await sess.exec("echo $X $0", env={"X": "from-env"})  # a string is /bin/sh -c
    assert res.stdout == b"from-env /bin/sh\n" or res.stdout.startswith(b"from-env "), res
    await sess.mkdir("/workspace/sub")
    res = await sess.exec(["pwd"], cwd="/workspace/sub")
    assert res.stdout == b"/workspace/sub\n"
    # shell(): sh -c unless a login shell is asked for; a login shell reads /etc/profile.
    assert (await sess.shell("echo $0")).stdout == b"sh\n"
    assert (await sess.shell("shopt -q login_shell 2>/dev/null; echo ${-}", login=True)).ok
    with pytest.raises(paddock.errors.ExecTimeout):
        await sess.exec(["sleep", "5"], timeout=0.3)
    with pytest.raises(InvalidRequest):
        await sess.exec([])


async def test_checkpoint_needs_runsc(sess: paddock.Session) -> None:
    # The tests' node runs no runsc: a memory checkpoint is refused, and the session runs on.
    with pytest.raises(paddock.errors.PolicyDenied):
        await sess.checkpoint()
    with pytest.raises(paddock.errors.PolicyDenied):
        await sess.checkpoint(leave_running=True)
    assert (await sess.exec(["true"])).ok


async def test_files(sess: paddock.Session) -> None:
    await sess.write("/workspace/a.txt", "hello")
    assert await sess.read("/workspace/a.txt") == b"hello"
    big = os.urandom(3 << 20)  # over the inline limit: the transfer service, both ways
    res = await sess.write("/workspace/big.bin", big)
    assert res["size"] == len(big)
    assert await sess.read("/workspace/big.bin") == big
    # From a file object and from chunks.
    import io

    await sess.write("/workspace/f.bin", io.BytesIO(b"x" * 1000))
    await sess.write("/workspace/c.bin", iter([b"a" * 700_000, b"b" * 10]))
    assert len(await sess.read("/workspace/c.bin")) == 700_010
    with pytest.raises(NotFound):
        await sess.read("/workspace/missing")
    with pytest.raises(InvalidPath):
        await sess.read("/etc/passwd")
    await sess.rm("/workspace/f.bin")
    with pytest.raises(NotFound):
        await sess.rm("/workspace/f.bin")
    await sess.rm("/workspace/f.bin", force=True)


async def test_ls_of_a_file_or_symlink_is_that_path(sess: paddock.Session) -> None:
    await sess.write("/workspace/plain.txt", "x")
    assert (await sess.exec(["ln", "-s", "plain.txt", "/workspace/link"])).ok
    # A directory a holding only a file a looks like a file a in ls: it must stay a listing.
    await sess.mkdir("/workspace/a/a", parents=True) if False else await sess.mkdir("/workspace/a")
    await sess.write("/workspace/a/a", "inner")
    [e] = await sess.ls("/workspace/plain.txt")
    assert (e.path, e.name, e.type, e.size) == ("/workspace/plain.txt", "plain.txt", "file", 1)
    [e] = await sess.ls("/workspace/link")
    assert (e.path, e.type) == ("/workspace/link", "symlink")
    [e] = await sess.ls("/workspace/a")
    assert (e.path, e.type) == ("/workspace/a/a", "file")
    names = {e.path for e in await sess.ls("/workspace")}
    assert {"/workspace/plain.txt", "/workspace/link", "/workspace/a"} <= names


async def test_processes(sess: paddock.Session) -> None:
    proc, out = await sess.start_process(["cat"], tty=True, rows=30, cols=100)
    assert out.running
    out = await proc.write("ping\n", yield_s=2, return_on_output=True)
    assert b"ping" in out.output
    await proc.resize(40, 120)
    [info] = [p for p in await sess.processes() if p["process_id"] == proc.id]
    assert info["tty"] and info["running"]
    await proc.signal("KILL")
    out = await proc.read(yield_s=1)
    assert not out.running and out.reason == "killed"
    # Without a TTY: stdin is a pipe; close it and cat ends.
    proc, _ = await sess.start_process(["cat"])
    out = await proc.write(b"abc", close_stdin=True, yield_s=2)
    while out.running:
        out = await proc.read(yield_s=1)
    assert out.output.endswith(b"abc") or b"abc" in out.output
    assert out.exit_code == 0


async def test_exposed_ports_are_deduplicated(client: paddock.Client) -> None:
    s = await client.create(image=os.environ["PADDOCK_IMAGE"], exposed_ports=[8000, 8000, 8001])
    try:
        ep = await s.port(8000)
        assert ep.port > 0 and ep.sandbox_port == 8000
        with pytest.raises(PaddockError):
            await s.port(9999)  # not exposed
    finally:
        await s.delete()


async def test_lifecycle_keeps_the_session(client: paddock.Client, sess: paddock.Session) -> None:
    await sess.write("/workspace/keep.txt", "kept")
    snap = await sess.persist()
    assert snap["snapshot_id"]
    await sess.stop()
    assert not await sess.running()
    again = await client.resume(sess.id)
    assert again.id == sess.id and again.epoch >= 1
    assert await sess.read("/workspace/keep.txt") == b"kept"
    await sess.shutdown()
    await sess.resume()  # the scheduler re-creates it from the snapshot
    assert await sess.read("/workspace/keep.txt") == b"kept"
    kids = await sess.fork(2)
    assert len(kids) == 2
    try:
        for k in kids:
            assert k.parent and k.parent["session_id"] == sess.id
            assert await k.read("/workspace/keep.txt") == b"kept"
    finally:
        for k in kids:
            await k.delete()
    await sess.delete()
    with pytest.raises(SessionNotFound):
        await client.lookup(sess.id)


async def test_events_export_and_tail(client: paddock.Client, engine: dict[str, str]) -> None:
    s = await client.create(image=engine["PADDOCK_IMAGE"], labels={"t": "events"},
                            trace=paddock.Trace(trace_id="trace_events_test", parent_span_id="span_1"))
    try:
        await s.exec(["true"])
        with pytest.raises(PaddockError) as e:  # a client may not read the events stream
            await client.export(s.id)
        assert e.value.code == "permission_denied"
        admin = await paddock.connect(creds=engine["PADDOCK_ADMIN_CREDS"], tenant=client.tenant)
        try:
            evs = await admin.export(s.id)
            ops = [(e["op"], e["phase"]) for e in evs]
            assert ("create", "finish") in ops and ("exec", "finish") in ops, ops
            [create] = [e for e in evs if e["op"] == "create" and e["phase"] == "start"]
            assert create["trace_id"] == "trace_events_test" and create["parent_span_id"] == "span_1"
            tail = admin.events(s.id)
            seen = [await tail.__anext__() for _ in evs]  # the history first
            assert [e["seq"] for e in seen] == [e["seq"] for e in evs]
            await s.exec(["echo", "later"])
            nxt = await asyncio.wait_for(tail.__anext__(), 30)
            assert nxt["op"] == "exec" and nxt["seq"] > evs[-1]["seq"]
            await tail.aclose()
        finally:
            await admin.close()
    finally:
        await s.delete()


async def test_trace_context_headers(engine: dict[str, str]) -> None:
    """The request carries traceparent/tracestate as NATS headers, as the Go client sends them:
    an admin connection answers a tenant's create subject itself and looks at what came."""
    admin = await paddock.connect(creds=engine["PADDOCK_ADMIN_CREDS"], tenant="tracehdr")
    try:
        got: asyncio.Future = asyncio.get_running_loop().create_future()

        async def answer(msg) -> None:  # type: ignore[no-untyped-def]
            if not got.done():
                got.set_result(msg)
            await msg.respond(b'{"result":{"session_id":"s1","node":"n"}}')

        sub = await admin.nc.subscribe("sbx.cmd.tracehdr.create", cb=answer)
        tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        s = await admin.create(image="x", trace=paddock.Trace(traceparent=tp, tracestate="k=v", trace_id="t1"))
        assert s.id == "s1"
        msg = await got
        assert msg.headers == {"traceparent": tp, "tracestate": "k=v"}
        await admin.create(image="x")  # none given, no OpenTelemetry: no header
        await sub.unsubscribe()
        with pytest.raises(ValueError):
            paddock.Trace(traceparent="not-w3c")
    finally:
        await admin.close()


async def test_bad_inputs(engine: dict[str, str], tmp_path) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "bad.creds"
    bad.write_text("{not json")
    with pytest.raises(InvalidRequest):
        await paddock.connect(creds=str(bad))
    with pytest.raises(InvalidRequest):
        await paddock.connect(creds=str(tmp_path / "missing.creds"))
    with pytest.raises(InvalidRequest):
        await paddock.connect(tls_ca=str(tmp_path / "missing-ca.pem"))
    with pytest.raises(paddock.errors.Unavailable):
        await paddock.connect(url="nats://127.0.0.1:1")
    with pytest.raises(paddock.errors.PermissionDenied):
        await paddock.connect(creds="none")


async def test_a_waiting_command_ends_when_its_node_is_lost(engine: dict[str, str]) -> None:
    """A session command that waits asks lookup every LIVENESS_CHECK and ends as unavailable once
    the session's node is declared lost; one whose node lives keeps waiting. An admin connection
    plays the engine on a tenant of its own: the session subject never answers, lookup says lost
    on its second call."""
    admin = await paddock.connect(creds=engine["PADDOCK_ADMIN_CREDS"], tenant="livetest")
    try:
        lookups = 0

        async def lookup(msg) -> None:  # type: ignore[no-untyped-def]
            nonlocal lookups
            lookups += 1
            status = "running" if lookups == 1 else "lost"
            await msg.respond(('{"result":{"status":"%s","node":"n9"}}' % status).encode())

        held = []
        arrived = asyncio.Event()

        async def hold(msg) -> None:  # type: ignore[no-untyped-def]
            held.append(msg)  # never answered: the command waits
            arrived.set()

        subs = [await admin.nc.subscribe("sbx.cmd.livetest.lookup", cb=lookup),
                await admin.nc.subscribe("sbx.cmd.livetest.s1.exec", cb=hold)]
        loop = asyncio.get_running_loop()
        start = loop.time()
        with pytest.raises(paddock.errors.Unavailable) as err:
            await admin.session("s1").exec(["sleep", "60"])
        assert "n9" in str(err.value) and "lost" in str(err.value)
        assert lookups >= 2 and held, (lookups, held)  # a lookup that timed out under load is asked again
        assert loop.time() - start < 30  # not the command's own timeout (60 s + 600 s)
        # The caller's own cancel still is a cancel, not a lost node.
        arrived.clear()
        task = asyncio.ensure_future(admin.session("s1").exec(["sleep", "60"]))
        await asyncio.wait_for(arrived.wait(), 10)  # the request is out and waiting
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for s in subs:
            await s.unsubscribe()
    finally:
        await admin.close()
