"""Fork (issue 25): a session forked into children through the provider. Each child has the
parent's files at the fork and its own workspace from then on; each knows its parent point; a
fork of no children, or from a snapshot the parent never recorded, is refused with its code."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from agents.sandbox import Manifest
from agents.sandbox.entries import File

from paddock_agents import PaddockSandboxClient, PaddockSandboxClientOptions
from paddock.errors import InvalidRequest, SnapshotNotFound
from paddock_agents.sandbox import PaddockSandboxSession


async def test_fork_three_children(options: PaddockSandboxClientOptions) -> None:
    client = PaddockSandboxClient(options)
    parent = await client.create(manifest=Manifest(entries={"seed.txt": File(content=b"seed\n")}))
    children = []
    try:
        async with parent:
            await parent.write(Path("state.txt"), io.BytesIO(b"before the fork\n"))
            children = await client.fork(parent, 3)
            assert len(children) == 3
            inner = parent._inner
            assert isinstance(inner, PaddockSandboxSession)
            ids = {c._inner.state.paddock_session_id for c in children}
            assert len(ids) == 3 and inner.state.paddock_session_id not in ids
            for child in children:
                point = child._inner.state.paddock_parent
                assert point is not None and point["session_id"] == inner.state.paddock_session_id
                assert len(point["root_sha256"]) == 64 and point["seq"] > 0
                assert (await child.read(Path("state.txt"))).read() == b"before the fork\n"
                assert (await child.read(Path("seed.txt"))).read() == b"seed\n"
            # A child's workspace is its own from the fork on.
            await children[0].write(Path("state.txt"), io.BytesIO(b"child 0\n"))
            assert (await parent.read(Path("state.txt"))).read() == b"before the fork\n"
            assert (await children[1].read(Path("state.txt"))).read() == b"before the fork\n"

            with pytest.raises(InvalidRequest):
                await inner.fork(0)
            with pytest.raises(SnapshotNotFound):
                await inner.fork(1, snapshot_id="never-recorded")
    finally:
        for child in children:
            await client.delete(child)
        await client.delete(parent)
