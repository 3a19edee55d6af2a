"""The README's examples: the notebook example runs as written, the regression checks'
commands and workflow use options that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

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


def _hookviz_commands(text: str) -> list[list[str]]:
    """Every ``hookviz ...`` command in ``text`` (shell lines, continuation lines joined), split."""
    import shlex

    joined = re.sub(r"\\\n\s*", " ", text)
    commands = []
    for line in joined.splitlines():
        for part in re.split(r"&&|;", line.split("#", 1)[0]):
            words = shlex.split(part)
            if words[:1] == ["hookviz"]:
                commands.append(words[1:])
    return commands


def _check_options(words: list[str]) -> None:
    import typer.main

    from hookviz.cli import app

    command = typer.main.get_command(app).commands[words[0]]
    known = {option for param in command.params for option in param.opts}
    for word in words[1:]:
        if word.startswith("-"):
            assert word in known, f"hookviz {words[0]} has no option {word}"


def test_regression_checks_commands_and_github_actions_example_are_valid():
    """The section's commands and its workflow use options that exist, and the workflow is
    YAML that runs a smoke check against a committed baseline."""
    yaml = pytest.importorskip("yaml")
    section = README.read_text(encoding="utf-8").split("## Regression checks", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```(bash|yaml)\n(.*?)```", section, re.S)
    commands = [words for kind, block in blocks if kind == "bash" for words in _hookviz_commands(block)]
    workflow = yaml.safe_load(next(block for kind, block in blocks if kind == "yaml"))
    steps = workflow["jobs"]["hookviz"]["steps"]
    runs = [step["run"] for step in steps if "hookviz" in step.get("run", "")]
    commands += [words for run in runs for words in _hookviz_commands(run)]
    assert {words[0] for words in commands} == {"run", "diff"}
    for words in commands:
        _check_options(words)
    checked = [words for words in commands if "--baseline" in words and "--fail-on" in words]
    assert any("drift" in words[words.index("--fail-on") + 1] for words in checked)
    assert any(step.get("if") == "failure()" and "hookviz diff" in step.get("run", "") for step in steps)
