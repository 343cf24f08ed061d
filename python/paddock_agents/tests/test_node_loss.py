"""Resume on another node: a fleet process leaves a session whose node then dies; a new process
resumes it from its serialised state, through the engine's scheduler, on a node that is up.

The Go test TestPythonProvider drives it in two steps around killing the node (PADDOCK_NODE_LOSS
names the state file and the step): `leave` on node A, then `resume` once A is dead and B is up.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from agents.sandbox import LocalSnapshotSpec, Manifest

from paddock_agents import PaddockSandboxClient, PaddockSandboxClientOptions

STEP = os.environ.get("PADDOCK_NODE_LOSS_STEP", "")
STATE = os.environ.get("PADDOCK_NODE_LOSS_STATE", "")

pytestmark = pytest.mark.skipif(not STATE, reason="PADDOCK_NODE_LOSS_STATE unset: TestPythonProvider's node-loss step runs it")


@pytest.mark.skipif(STEP != "leave", reason="the leave step")
async def test_leave_session_on_node(options: PaddockSandboxClientOptions, tmp_path: Path) -> None:
    client = PaddockSandboxClient(options)
    session = await client.create(manifest=Manifest(), snapshot=LocalSnapshotSpec(base_path=Path(STATE).parent))
    await session.start()
    await session.write(Path("work/progress.txt"), io.BytesIO(b"step 1 done\n"))
    await session.stop()  # persists: a Paddock snapshot, and the SDK's
    Path(STATE).write_text(json.dumps(client.serialize_session_state(session.state)))
    assert session.state.node  # type: ignore[attr-defined]
    await client.aclose()  # the process goes away without shutting the session down


@pytest.mark.skipif(STEP != "resume", reason="the resume step")
async def test_resume_on_another_node(options: PaddockSandboxClientOptions) -> None:
    payload = json.loads(Path(STATE).read_text())
    old_node = payload["node"]
    client = PaddockSandboxClient(options)
    session = await client.resume(client.deserialize_session_state(payload))
    assert session.state.node and session.state.node != old_node, (old_node, session.state.node)  # type: ignore[attr-defined]
    assert session.state.paddock_session_id == payload["paddock_session_id"]  # type: ignore[attr-defined]
    async with session:
        assert (await session.read(Path("work/progress.txt"))).read() == b"step 1 done\n"
        assert (await session.exec("python3 -c 'print(6*7)'")).stdout == b"42\n"
    await client.delete(session)
