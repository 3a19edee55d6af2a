"""The README's notebook example runs as written."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_notebook_example_runs_as_written(tmp_path, monkeypatch):
    text = README.read_text(encoding="utf-8")
    section = text.split("## In a notebook", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    result = namespace["result"]
    assert result["layer4"].cam.shape == (7, 7)
    assert (tmp_path / "out" / "report.json").exists()
    assert (tmp_path / "out" / "layer4.summary.png").exists()
