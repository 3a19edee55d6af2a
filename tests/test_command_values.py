"""hookviz's commands take their parameters' plain values without typer's pydantic adapters
(``hookviz.command_values``): the values must be typer's own, value and type."""

from __future__ import annotations

import pytest
import typer

from hookviz.cli import app
from hookviz.command_values import _UNSET, plain


def _commands():
    group = typer.main.get_command(app)
    context = group.make_context("hookviz", ["run", "x.png"], resilient_parsing=True)
    return context, [group, *(group.get_command(context, name) for name in group.list_commands(context))]


#: Values a command line or a default gives: none, texts, whole numbers, numbers, lists of texts.
SAMPLES = (None, "7", "text", "", 3, 0, 2.5, float("inf"), True, ["a", "b"], ("a",), [], b"x", [1])


def test_every_plain_value_is_what_typers_adapter_makes_of_it():
    context, commands = _commands()
    checked = 0
    for command in commands:
        for param in command.get_params(context):
            for value in (param.default, *SAMPLES):
                ours = plain(param, value)
                if ours is _UNSET:
                    continue
                try:
                    theirs = param.get_runtime_param().coerce(value, param=param, ctx=context)
                except Exception as error:  # typer refuses it: so must the plain path
                    pytest.fail(f"{command.name} {param.name}={value!r}: plain gives {ours!r}, typer refuses ({error})")
                assert (ours, type(ours)) == (theirs, type(theirs)), (command.name, param.name, value)
                checked += 1
    assert checked > 300  # every command's parameters, with their defaults and the samples


def test_the_default_runs_command_line_builds_no_adapter():
    """Parsing ``hookviz run`` as the 16-photo bench gives it imports no pydantic: no parameter
    builds typer's adapter (each costs one, and the first imports pydantic, ~0.1 s of CPU)."""
    group = typer.main.get_command(app)
    line = ["photos", "--model", "resnet50", "--weights", "none", "--layer", "layer3.-1", "-q", "--out", "out"]
    with group.make_context("hookviz", ["run", *line], resilient_parsing=False) as outer:
        command = group.get_command(outer, "run")
        context = command.make_context("run", line, parent=outer)
    params = command.get_params(context)
    assert context.params["layer"] == ["layer3.-1"] and context.params["images"] == ["photos"]
    assert [p.name for p in params if p._runtime_param is not None] == []
