"""README.md's tour runs as written."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys


def test_readme_tour(engine: dict[str, str]) -> None:
    text = (pathlib.Path(__file__).parent.parent / "README.md").read_text()
    [block] = re.findall(r"## A tour\n.*?```python\n(.*?)```", text, re.S)
    # In its own interpreter, as a reader would run it (asyncio.run at the top level).
    res = subprocess.run([sys.executable, "-c", block], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
