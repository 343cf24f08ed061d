"""A SandboxAgent run through Runner with the SDK's scripted model, its JSONL audit sink
compared with Paddock's own events of the same run (`engine events export`)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from agents import RunConfig, Runner, set_trace_processors, trace
from agents.items import ToolCallOutputItem
from agents.sandbox import Manifest, SandboxAgent, SandboxRunConfig
from agents.sandbox.capabilities import Filesystem, Shell
from agents.sandbox.entries import File
from agents.sandbox.session import Instrumentation, JsonlOutboxSink
from agents.testing import ScriptedModel, assistant_message, function_call
from openai.types.responses import ResponseCustomToolCall

from paddock_agents import PaddockSandboxClient, PaddockSandboxClientOptions


def _export(session_id: str) -> list[dict]:
    engine = os.environ.get("PADDOCK_ENGINE")
    if not engine:
        pytest.skip("PADDOCK_ENGINE (the engine binary) is unset: cannot export Paddock's events")
    env = {**os.environ, "PADDOCK_CREDS": os.environ.get("PADDOCK_ADMIN_CREDS", "")}
    out = subprocess.run(
        [engine, "--server", os.environ["PADDOCK_URL"], "events", "export", "--session", session_id],
        env=env, capture_output=True, check=True, timeout=60,
    ).stdout.decode()
    return [json.loads(line) for line in out.splitlines() if line.strip()]


async def test_runner_shell_and_patch_audited(options: PaddockSandboxClientOptions, tmp_path: Path) -> None:
    set_trace_processors([])  # traces on (the SDK's spans exist), exported nowhere
    sink_path = tmp_path / "sdk-events.jsonl"
    client = PaddockSandboxClient(options, instrumentation=Instrumentation(sinks=[JsonlOutboxSink(sink_path, mode="sync")]))
    manifest = Manifest(entries={"task.md": File(content=b"write hello.py and run it\n")})
    model = ScriptedModel(
        [
            [
                ResponseCustomToolCall(
                    id="patch_item", type="custom_tool_call", name="apply_patch", call_id="patch",
                    input="*** Begin Patch\n*** Add File: hello.py\n+print('hello from', 'paddock')\n*** End Patch\n",
                )
            ],
            [function_call("exec_command", {"cmd": "python3 hello.py && cat task.md; exit 3", "login": False}, call_id="run")],
            [assistant_message("done", item_id="final")],
        ]
    )
    agent = SandboxAgent(name="coder", model=model, default_manifest=manifest, capabilities=[Shell(), Filesystem()])
    session = await client.create(manifest=manifest)
    paddock_id = session.state.paddock_session_id  # type: ignore[attr-defined]
    try:
        with trace("paddock-provider-test") as tr:
            async with session:
                result = await Runner.run(agent, "do the task", run_config=RunConfig(sandbox=SandboxRunConfig(session=session)))
        assert result.final_output == "done"
        outputs = {i.call_id: i.output for i in result.new_items if isinstance(i, ToolCallOutputItem)}  # type: ignore[attr-defined]
        assert outputs["patch"] == "Created hello.py"
        assert "hello from paddock" in str(outputs["run"]) and "write hello.py and run it" in str(outputs["run"])
        assert "Process exited with code 3" in str(outputs["run"]), outputs["run"]
        model.assert_complete()
    finally:
        await client.delete(session)
        await client.aclose()

    sdk = [json.loads(line) for line in sink_path.read_text().splitlines()]
    paddock = _export(paddock_id)
    assert paddock, "Paddock recorded no events for the session"
    # Every Paddock event of the run is in the SDK's trace; every SDK op span that reached
    # Paddock is the parent of Paddock's events of the same op.
    by_parent: dict[str, set[str]] = {}
    for ev in paddock:
        if ev.get("trace_id"):
            assert ev["trace_id"] == tr.trace_id, ev
            by_parent.setdefault(ev.get("parent_span_id", ""), set()).add(ev["op"])
    assert by_parent, "no Paddock event carries the SDK's trace id"
    # The SDK audits its session ops (its tools call the session beneath the audit layer; its stop
    # persists nothing without a snapshot spec); each
    # SDK op span is the parent of the Paddock ops it was made of.
    made_of = {"start": {"running"}, "running": {"running"}, "write": {"write"}, "stop": set(), "shutdown": {"stop", "shutdown"}}
    joined = 0
    for ev in sdk:
        if ev["phase"] != "finish" or ev["op"] not in made_of:
            continue
        assert ev.get("trace_id") == tr.trace_id, ev
        under = by_parent.get(ev["span_id"], set())
        assert made_of[ev["op"]] <= under, f"SDK {ev['op']} span {ev['span_id']}: Paddock ops under it {under}"
        joined += 1
    assert joined >= 5, [(e["op"], e["phase"]) for e in sdk]
    # The agent's failing command (the Shell tool runs it as a process: supports_pty) is in
    # Paddock's audit, in the run's trace, with its argv and exit code 3.
    started = [e for e in paddock if e["op"] == "proc_start" and e["phase"] == "start" and "python3 hello.py" in " ".join(e["data"]["argv"])]
    assert len(started) == 1 and started[0]["trace_id"] == tr.trace_id
    finished = [e for e in paddock if e["op"] == "proc_start" and e["phase"] == "finish" and e["span_id"] == started[0]["span_id"]]
    exited = [e for e in paddock if e["op"] == "proc_exit" and (e.get("data") or {}).get("exit_code") == 3]
    assert len(finished) == 1 and finished[0]["data"]["exit_code"] == 3 and len(exited) == 1
    # Paddock's chain: seq from 1 without gaps, every start finished.
    assert [e["seq"] for e in paddock] == list(range(1, len(paddock) + 1))
    spans = {}
    for e in paddock:
        spans.setdefault(e["span_id"], []).append(e["phase"])
    assert all(p == ["start", "finish"] for p in spans.values()), spans
