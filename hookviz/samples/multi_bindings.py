"""What a multi-input run binds: ``--input NAME=PATH`` (``explain()``'s mapping), each binding
resolved against the model's ``forward`` signature (a keyword, or a position), and the
``--aligned`` inputs that get the main photo's resize and crop.

The plain positional images are the first input (position 0). A binding names a file (the
same input for every sample) or a folder (its files pair with the first input's by relative
path without suffix: ``rgb/a/001.png`` with ``depth/a/001.npy``).
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hookviz.errors import UsageError, arg, did_you_mean
from hookviz.options.declared import option

__all__ = ["MULTI", "MultiOptions", "Binding", "parse_bindings", "resolve", "given_inputs", "with_sources", "bound_to"]

#: The multi-input kind's name.
MULTI = "multi"


@dataclass(frozen=True)
class MultiOptions:
    """The multi-input kind's settings: ``--input`` and ``--aligned`` (``explain()``: a mapping as
    its image, or ``input=`` and ``aligned=``). ``sources``: the positional images, the first input
    (set by the run, not a flag); ``bound``: the bindings resolved against the model (``Multi.settings_for_model``)."""

    input: tuple | None = option(
        None,
        repeat=True,
        help="Bind a forward argument to a file or folder: NAME=PATH by keyword, 0=PATH by position (repeat per input); "
        "the positional images are the first input.",
    )
    aligned: tuple | None = option(
        None, repeat=True, help="An input spatially aligned with the first (a depth map): same resize and crop."
    )
    sources: tuple = field(default=(), compare=False, repr=False)
    bound: tuple = field(default=(), compare=False, repr=False)
    shapes: tuple = field(default=(), compare=False, repr=False)

    def asked(self) -> dict:
        """What report.json's ``asked.sample`` keeps: each binding as given (an in-memory value by its type and shape)."""
        return {
            "input": [binding.text for binding in self.bound] or list(map(str, self.input or ())),
            "aligned": list(self.aligned or ()),
        }


@dataclass(frozen=True)
class Binding:
    """One input: ``given`` its name as given (``depth``, ``0``), ``value`` what it is bound to
    (paths, or a value in memory), ``name`` the forward argument it fills (the key of the
    sample's tensors), ``position`` where it is passed by position (``None``: by keyword)."""

    given: str
    value: Any
    name: str = ""
    position: int | None = None
    aligned: bool = False

    @property
    def in_memory(self) -> bool:
        return not (isinstance(self.value, tuple) and all(isinstance(v, Path) for v in self.value))

    @property
    def paths(self) -> tuple[Path, ...]:
        return self.value if not self.in_memory else ()

    @property
    def text(self) -> str:
        if not self.in_memory:
            return f"{self.given}={','.join(str(p) for p in self.value)}"
        shape = getattr(self.value, "shape", None)
        return f"{self.given}=<{type(self.value).__name__}{'' if shape is None else ' ' + 'x'.join(map(str, shape))}>"


def _as_value(value):
    if isinstance(value, (str, os.PathLike)):
        return (Path(value),)
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, (str, os.PathLike)) for v in value):
        return tuple(Path(v) for v in value)
    return value


def parse_bindings(settings: MultiOptions) -> list[Binding]:
    """The bindings of ``settings``: the positional images first (position 0), then each ``--input``.

    Raises:
        UsageError: an ``--input`` without ``NAME=PATH``, or a file or folder that is not there.
    """
    found = [Binding("0", tuple(Path(s) for s in settings.sources))] if settings.sources else []
    for item in settings.input or ():
        if isinstance(item, tuple) and len(item) == 2:  # explain()'s mapping: (name, value)
            name, value = str(item[0]), _as_value(item[1])
        else:
            name, _, text = str(item).partition("=")
            if not name or not text:
                raise UsageError(f"{arg('input', item)}: give NAME=PATH (a forward argument's name, or its position: 0=PATH)")
            value = (Path(text),)
        binding = Binding(name.strip(), value)
        for path in binding.paths:
            if not path.exists():
                raise UsageError(f"{arg('input', binding.text)}: {path} is not there; give a file or a folder")
        found.append(binding)
    return found


def _parameters(module) -> tuple[list[str], list[str], bool, bool]:
    """The forward's positional parameters, keyword-only ones, and whether it takes ``*args``, ``**kwargs``."""
    try:
        signature = inspect.signature(module.forward)
    except (TypeError, ValueError):
        return [], [], True, True
    kinds = inspect.Parameter
    params = list(signature.parameters.values())
    positional = [p.name for p in params if p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)]
    keyword = [p.name for p in params if p.kind == kinds.KEYWORD_ONLY]
    return (
        positional,
        keyword,
        any(p.kind == kinds.VAR_POSITIONAL for p in params),
        any(p.kind == kinds.VAR_KEYWORD for p in params),
    )


def _required(module) -> list[str]:
    try:
        params = inspect.signature(module.forward).parameters.values()
    except (TypeError, ValueError):
        return []
    plain = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return [p.name for p in params if p.default is inspect.Parameter.empty and p.kind not in plain]


def resolve(bindings: list[Binding], module, model: str, aligned: tuple = ()) -> tuple[Binding, ...]:
    """``bindings`` with the forward argument each fills, the one at position 0 (else the first) first.

    Raises:
        UsageError: an input the forward does not take, two inputs bound to one argument, a
            required argument left unbound, or an ``--aligned`` name that is no input.
    """
    positional, keyword, var_args, var_kwargs = _parameters(module)
    resolved: dict[str, Binding] = {}
    for binding in bindings:
        name, position = _argument(binding, positional, keyword, var_args, var_kwargs, model)
        if name in resolved:
            first = resolved[name]
            raise UsageError(
                f"{arg('input', binding.text)} and {arg('input', first.text)}: two inputs bound to one argument "
                f"({name!r} of {model}'s forward); bind each argument once"
            )
        resolved[name] = dataclasses.replace(binding, name=name, position=position)
    missing = [name for name in _required(module) if name not in resolved]
    if missing:
        raise UsageError(
            f"{arg('input')}: {model}'s forward needs {', '.join(map(repr, missing))} too; bind it with "
            f"{arg('input', missing[0] + '=PATH')}"
        )
    names = {b.given for b in resolved.values()} | set(resolved)
    for name in aligned:
        if name not in names:
            raise UsageError(f"{arg('aligned', name)}: no input of that name{did_you_mean(name, sorted(names))}")
    order = sorted(resolved.values(), key=lambda b: (b.position is None, b.position or 0))
    made = [dataclasses.replace(b, aligned=b.name in aligned or b.given in aligned) for b in order]
    _check_aligned(made)
    _check_gaps(made, model)
    return tuple(made)


def _argument(binding: Binding, positional, keyword, var_args: bool, var_kwargs: bool, model: str):
    given = binding.given
    if given.isdigit():
        index = int(given)
        if index < len(positional):
            return positional[index], index
        if var_args:
            return given, index
        raise UsageError(
            f"{arg('input', binding.text)}: {model}'s forward takes {len(positional)} positional argument(s) "
            f"({', '.join(positional)}); no position {index}"
        )
    if given in positional:
        return given, positional.index(given)
    if given in keyword or var_kwargs:
        return given, None
    known = positional + keyword
    raise UsageError(
        f"{arg('input', binding.text)}: {model}'s forward takes no argument {given!r} "
        f"(it takes {', '.join(known) or 'none by name'}){did_you_mean(given, known)}"
    )


def _check_aligned(bindings: list[Binding]) -> None:
    """``--aligned`` names a map to resize and crop as the first input's photo: not that photo, nor a CSV's rows."""
    for index, binding in enumerate(bindings):
        if binding.aligned and index == 0:
            raise UsageError(
                f"{arg('aligned', binding.given)}: that is the first input, the photo the others are aligned with; "
                "name another input"
            )
        if binding.aligned and binding.paths and all(p.suffix.lower() == ".csv" for p in binding.paths):
            raise UsageError(
                f"{arg('aligned', binding.given)}: a CSV of features, a row per sample, has no size to align; drop --aligned"
            )


def _check_gaps(bindings: list[Binding], model: str) -> None:
    """Positional inputs are passed 0, 1, 2...: one after a gap goes by keyword, unless it has no name."""
    expected = 0
    for binding in bindings:
        if binding.position is None:
            continue
        if binding.position != expected and binding.name.isdigit():
            raise UsageError(
                f"{arg('input', binding.text)}: position {binding.position} of {model}'s forward follows no input at {expected}"
            )
        expected = binding.position + 1


def given_inputs(sample_options) -> MultiOptions | None:
    """The ``MultiOptions`` among ``sample_options`` that binds inputs, else ``None``."""
    return next((o for o in sample_options if isinstance(o, MultiOptions) and (o.input or o.sources)), None)


def bound_to(sample_options, mapping) -> tuple:
    """``sample_options`` with ``mapping`` (forward argument to file, folder or value) as its
    ``MultiOptions``' inputs: that group's other settings (``aligned``) kept, or a new group.

    Raises:
        UsageError: the group binds inputs of its own already.
    """
    given = [o for o in sample_options if isinstance(o, MultiOptions)]
    if any(o.input for o in given):
        raise UsageError(f"{arg('input')}: the inputs are given as a mapping already; give one or the other")
    base = given[0] if given else MultiOptions()
    made = dataclasses.replace(base, input=tuple(mapping.items()))
    return (*(o for o in sample_options if o is not base), made)


def with_sources(sample_options, sources) -> tuple:
    """``sample_options`` with the run's positional images as the first input of its ``MultiOptions``, where it binds inputs."""
    found = given_inputs(sample_options)
    if found is None or not sources:
        return tuple(sample_options)
    return tuple(dataclasses.replace(o, sources=tuple(map(str, sources))) if o is found else o for o in sample_options)
