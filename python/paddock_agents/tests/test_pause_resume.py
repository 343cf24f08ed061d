"""Pause and resume, as the SDK's integration test test_runner_pause_resume.py does it (without its
PTY and mount steps): a run stops at an approval, its RunState goes through JSON, and a resumed run
finds the workspace as it was, through stop / serialise state / resume."""

from __future__ import annotations

import io
from pathlib import Path

from agents import RunConfig, Runner, function_tool
from agents.items import ToolCallOutputItem
from agents.run_state import RunState
from agents.sandbox import LocalSnapshotSpec, Manifest, SandboxAgent, SandboxRunConfig
from agents.sandbox.capabilities import Capability
from agents.sandbox.entries import Dir, File
from agents.sandbox.session import CallbackSink, Instrumentation
from agents.testing import ScriptedModel, assistant_message, function_call

from paddock_agents import PaddockSandboxClient, PaddockSandboxClientOptions


class FileTools(Capability):
    type: str = "paddock-file-tools"

    def __init__(self) -> None:
        super().__init__(type="paddock-file-tools")

    def tools(self):  # type: ignore[no-untyped-def]
        @function_tool(name_override="write_file", failure_error_function=None)
        async def write_file(path: str, content: str) -> str:
            assert self.session is not None
            await self.session.write(Path(path), io.BytesIO(content.encode()))
            return f"wrote {path}"

        @function_tool(name_override="read_file", failure_error_function=None)
        async def read_file(path: str) -> str:
            assert self.session is not None
            return (await self.session.read(Path(path))).read().decode()

        return [write_file, read_file]


def _outputs(items) -> list[str]:  # type: ignore[no-untyped-def]
    return [str(i.output) for i in items if isinstance(i, ToolCallOutputItem)]


async def test_runner_pause_and_resume(options: PaddockSandboxClientOptions) -> None:
    events = []
    client = PaddockSandboxClient(options, instrumentation=Instrumentation(sinks=[CallbackSink(lambda e, _s: events.append(e), mode="sync")]))
    manifest = Manifest(entries={"notes/seed.txt": File(content=b"seed\n"), "out": Dir()})

    @function_tool(name_override="approval_tool", needs_approval=True)
    def approval_tool() -> str:
        return "approved"

    def agent(model: ScriptedModel) -> SandboxAgent:
        return SandboxAgent(name="sandbox", model=model, default_manifest=manifest, tools=[approval_tool], capabilities=[FileTools()])

    first_model = ScriptedModel(
        [
            [function_call("write_file", {"path": "runtime_note.txt", "content": "runtime note v1\n"}, call_id="w")],
            [function_call("write_file", {"path": "out/result.txt", "content": "result\n"}, call_id="w2")],
            [function_call("approval_tool", {}, call_id="approve")],
        ]
    )
    first_agent = agent(first_model)
    first = await Runner.run(first_agent, "write and wait", run_config=RunConfig(sandbox=SandboxRunConfig(client=client)))
    assert _outputs(first.new_items) == ["wrote runtime_note.txt", "wrote out/result.txt"]
    assert len(first.interruptions) == 1
    state = first.to_state()
    assert state._sandbox is not None and state._sandbox["backend_id"] == "paddock"
    session_state = state._sandbox["session_state"]
    assert session_state["type"] == "paddock" and session_state["paddock_session_id"]
    assert "secret_env" not in session_state.get("options", {})

    def ok(op: str) -> int:
        return sum(1 for e in events if e.op == op and e.phase == "finish" and getattr(e, "ok", False))

    assert ok("stop") == 1 and ok("shutdown") == 1

    second_model = ScriptedModel(
        [
            [function_call("read_file", {"path": "runtime_note.txt"}, call_id="r1")],
            [function_call("read_file", {"path": "notes/seed.txt"}, call_id="r2")],
            [assistant_message("done", item_id="final")],
        ]
    )
    second_agent = agent(second_model)
    restored = await RunState.from_json(second_agent, state.to_json())
    restored.approve(restored.get_interruptions()[0])
    resumed = await Runner.run(second_agent, restored, run_config=RunConfig(sandbox=SandboxRunConfig(client=client)))
    assert resumed.final_output == "done"
    assert _outputs(resumed.new_items)[-3:] == ["approved", "runtime note v1\n", "seed\n"]
    assert ok("stop") == 2 and ok("shutdown") == 2
    second_model.assert_complete()
    await client.aclose()


async def test_snapshot_round_trip_through_serialised_state(options: PaddockSandboxClientOptions, tmp_path: Path) -> None:
    client = PaddockSandboxClient(options)
    session = await client.create(manifest=Manifest(), snapshot=LocalSnapshotSpec(base_path=tmp_path))
    async with session:
        await session.write(Path("a/b.txt"), io.BytesIO(b"kept\n"))
        assert (await session.exec("echo tmp > scratch.txt")).ok()
    # async with ran stop (the SDK's tar into its LocalSnapshot, Paddock's persist) and shutdown.
    payload = client.serialize_session_state(session.state)
    await client.aclose()

    # A new client, as a new process would have, resumes from the JSON: the node re-creates the
    # shut-down sandbox from Paddock's snapshot (through the scheduler when the node does not serve it).
    client2 = PaddockSandboxClient(options)
    resumed = await client2.resume(client2.deserialize_session_state(payload))
    assert resumed.state.paddock_session_id == payload["paddock_session_id"]  # type: ignore[attr-defined]
    async with resumed:
        assert (await resumed.read(Path("a/b.txt"))).read() == b"kept\n"
        assert (await resumed.read(Path("scratch.txt"))).read() == b"tmp\n"
    await client2.delete(resumed)

    # Deleted in Paddock: resume makes a new Paddock session and the SDK restores its snapshot.
    client3 = PaddockSandboxClient(options)
    again = await client3.resume(client3.deserialize_session_state(client.serialize_session_state(resumed.state)))
    assert again.state.paddock_session_id != payload["paddock_session_id"]  # type: ignore[attr-defined]
    async with again:
        assert (await again.read(Path("a/b.txt"))).read() == b"kept\n"
    await client3.delete(again)
