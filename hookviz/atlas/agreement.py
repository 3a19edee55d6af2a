"""Whether shards' states were run alike: the options that decide what a shard collects (its
recipe: model, weights, layers, ``--top``, ``--rank``, ``--relevance``, the samples, ``--frames``...)
and, for a shard, those it renders with (naming, visualising: ``RENDERING``). Shards run otherwise
cannot make the one atlas a single process writes: ``first_difference`` finds the option, and the
shard (``refuse_shard``) or ``--merge`` (``refuse_merge``) says so in one line, naming the state
files and what to do.
"""

from __future__ import annotations

import os
from pathlib import Path

from hookviz.atlas.request import RENDERING
from hookviz.atlas.state import AtlasState
from hookviz.errors import UsageError, arg, display_path

__all__ = ["first_difference", "refuse_shard", "refuse_merge", "comparable"]

#: A recipe's keys that are no option of their own (``AtlasPlan.recipe``): the samples' digest.
_SAMPLES = "samples"

#: How many state files a line names for one value before it counts the rest.
_NAMED = 3


def comparable(name: str, value):
    """An option's value as two command lines are compared: files by their absolute path."""
    if value is not None and (name == "vocabulary" or (name == "label_weights" and os.path.isfile(value))):
        return os.path.abspath(value)
    return value


def _options(state: AtlasState, rendering: bool) -> dict:
    """``state``'s options by name; with ``rendering``, its naming and visualising ones too (a group
    that is off counts as its first option only: the others are not read)."""
    options = dict(state.recipe)
    if rendering and state.rendering is not None:
        for group in RENDERING:
            on = state.rendering.get(group[0])
            for name in group:
                options[name] = comparable(name, state.rendering.get(name)) if on or name == group[0] else None
    return options


def first_difference(states: list[AtlasState], rendering: bool = False) -> str | None:
    """The first option ``states`` were run with differently, by name; ``None``: they agree.
    ``rendering``: compare the naming and visualising options too (where every state records them)."""
    rendering = rendering and all(state.rendering is not None for state in states)
    seen = [_options(state, rendering) for state in states]
    for name in dict.fromkeys(key for options in seen for key in options):
        if len({repr(options.get(name)) for options in seen}) > 1:
            return name
    return None


def spelled(name: str, value) -> str:
    """Option ``name`` with ``value``, as a command line gives it (``--top 5``, ``no --relevance``)."""
    if name == "sources":
        return f"DATA {' '.join(map(str, value))}"
    if value is None or value is False:
        return f"no {arg(name)}"
    if name == "layers":
        return " ".join(arg(name, layer) for layer in value)
    return arg(name, value)


def _flag(name: str) -> str:
    return "DATA" if name == "sources" else arg(name)


def _shard_name(path: Path) -> str:
    return display_path(path.name)


def refuse_shard(name: str, mine: tuple[Path, AtlasState], theirs: tuple[Path, AtlasState]) -> UsageError:
    """The error of a shard (``mine``: its state file and state) run otherwise than another's on ``name``."""
    (my_path, my_state), (their_path, their_state) = mine, theirs
    folder = display_path(their_path.parent)
    if name == _SAMPLES:
        return UsageError(
            f"{folder}: {_shard_name(their_path)} was run over other samples than {_shard_name(my_path)} (files added "
            "or removed since); shards make one atlas only over the same samples: run every shard again, into another --out"
        )
    ours, other = (spelled(name, _options(s, True).get(name)) for s in (my_state, their_state))
    kept = " (and --skip-existing: its samples are kept)" if any(name in group for group in RENDERING) else ""
    return UsageError(
        f"{_flag(name)}: {_shard_name(their_path)} in {folder} was run with {other}, this shard ({_shard_name(my_path)}) "
        f"with {ours}; shards make one atlas only when run with the same options: run this shard again with {other}{kept}, "
        f"or every shard again with {ours} into another --out"
    )


def refuse_merge(out: Path, name: str, states: list[tuple[Path, AtlasState]]) -> UsageError:
    """The error of ``hookviz atlas --merge OUT`` over shards run otherwise on ``name``."""
    if name == _SAMPLES:
        said = "were run over different samples (files added or removed between them)"
        todo = "run every shard again, into another --out"
    else:
        by_value: dict[str, list[str]] = {}
        for path, state in states:
            by_value.setdefault(spelled(name, _options(state, False).get(name)), []).append(_shard_name(path))
        listed = "; ".join(f"{value} ({_files(files)})" for value, files in by_value.items())
        said = f"were run with different {_flag(name)}: {listed}"
        todo = "run the shards that differ again with the same options as the others, then merge"
    return UsageError(f"{arg('merge', display_path(out))}: the shards {said}; they cannot make one atlas: {todo}")


def _files(names: list[str]) -> str:
    shown = ", ".join(names[:_NAMED])
    return shown if len(names) <= _NAMED else f"{shown} and {len(names) - _NAMED} more"
