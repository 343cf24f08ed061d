"""Per-op latency of the Python client (paddock) and the Agents SDK provider (paddock_agents):
p50 of N exec, read and write ops on one session each, printed as JSON lines
{"impl", "op", "n", "p50_us", "p90_us"}. Run by the Go test cmd/engine TestPythonLatency, which
times the Go client against the same engine in the same run (PADDOCK_URL, PADDOCK_CREDS,
PADDOCK_IMAGE; N from PADDOCK_BENCH_N, default 200).

    python3 latency.py [--profile]   # --profile: cProfile of the client's exec loop to stderr
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import statistics
import sys
import time
from pathlib import Path

N = int(os.environ.get("PADDOCK_BENCH_N", "200"))
PAYLOAD = b"x" * 1024  # 1 KiB: the small-file case, inline in the request


def _report(impl: str, op: str, samples: list[float]) -> None:
    samples.sort()
    print(json.dumps({"impl": impl, "op": op, "n": len(samples), "p50_us": round(statistics.median(samples) * 1e6, 1),
                      "p90_us": round(samples[int(len(samples) * 0.9)] * 1e6, 1)}), flush=True)


async def _time(fn, n: int = N) -> list[float]:  # type: ignore[no-untyped-def]
    for _ in range(min(20, n)):  # warm up
        await fn()
    out = []
    for _ in range(n):
        t = time.perf_counter()
        await fn()
        out.append(time.perf_counter() - t)
    return out


async def bench_client() -> None:
    import paddock

    async with await paddock.connect() as c:
        s = await c.create(image=os.environ.get("PADDOCK_IMAGE"))
        try:
            await s.write("/workspace/f", PAYLOAD)
            _report("python paddock", "exec", await _time(lambda: s.exec(["true"])))
            _report("python paddock", "read", await _time(lambda: s.read("/workspace/f")))
            _report("python paddock", "write", await _time(lambda: s.write("/workspace/f", PAYLOAD)))
        finally:
            await s.delete()


async def bench_provider() -> None:
    from paddock_agents import PaddockSandboxClient

    client = PaddockSandboxClient()
    session = await client.create()
    try:
        await session.start()
        p = Path("f")
        await session.write(p, io.BytesIO(PAYLOAD))
        _report("python paddock_agents", "exec", await _time(lambda: session.exec("true", shell=False)))
        _report("python paddock_agents", "read", await _time(lambda: session.read(p)))
        _report("python paddock_agents", "write", await _time(lambda: session.write(p, io.BytesIO(PAYLOAD))))
    finally:
        await client.delete(session)


async def profile_client() -> None:
    import cProfile
    import pstats

    import paddock

    async with await paddock.connect() as c:
        s = await c.create(image=os.environ.get("PADDOCK_IMAGE"))
        try:
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(N):
                await s.exec(["true"])
            prof.disable()
            pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(25)
        finally:
            await s.delete()


if __name__ == "__main__":
    if "--profile" in sys.argv:
        asyncio.run(profile_client())
    else:
        asyncio.run(bench_client())
        if os.environ.get("PADDOCK_BENCH_PROVIDER", "1") == "1":
            asyncio.run(bench_provider())
