"""Validate `engine events export --format sdk` output with the OpenAI Agents SDK's own model.

Usage: python3 validate_sdk_events.py EVENTS.jsonl
(with the SDK's src and its dependencies on PYTHONPATH; cmd/engine's
TestEventsExportSDK runs it).

Every line must be accepted by validate_sandbox_session_event, and the
export must hold an exec finish that exited 3 with ok False and data
exit_code 3. Prints a summary; exits non-zero on any failure.
"""

import collections
import json
import sys

from agents.sandbox.session.events import (
    SandboxSessionFinishEvent,
    validate_sandbox_session_event,
)


def main(path: str) -> None:
    with open(path, encoding="utf-8") as f:
        lines = [line for line in f.read().splitlines() if line]
    valid = []
    for n, line in enumerate(lines, 1):
        try:
            valid.append(validate_sandbox_session_event(json.loads(line)))
        except Exception as e:  # report the line, then fail below
            print(f"line {n}: not a valid SDK event: {e}\n  {line}", file=sys.stderr)
    assert len(valid) == len(lines), f"{len(valid)} valid events, want {len(lines)} (one per line)"

    exit3 = [
        ev
        for ev in valid
        if isinstance(ev, SandboxSessionFinishEvent) and ev.op == "exec" and ev.data.get("exit_code") == 3
    ]
    assert exit3, "no exec finish with data exit_code 3"
    for ev in exit3:
        assert ev.ok is False, f"exec finish with exit 3 has ok {ev.ok!r}, want False"
        assert ev.data.get("process.exit.code") == 3, f"process.exit.code = {ev.data.get('process.exit.code')!r}"

    by_op = collections.Counter(f"{ev.op}/{ev.phase}" for ev in valid)
    failed = collections.Counter(
        str(ev.error_code) for ev in valid if isinstance(ev, SandboxSessionFinishEvent) and ev.error_code
    )
    sessions = {str(ev.session_id) for ev in valid}
    print(
        f"{len(valid)} of {len(lines)} lines are valid SDK events; "
        f"{len(sessions)} session(s); ops {dict(sorted(by_op.items()))}; "
        f"error codes {dict(sorted(failed.items()))}"
    )


if __name__ == "__main__":
    main(sys.argv[1])
