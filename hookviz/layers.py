"""Layers: turn what the user typed after ``--layer`` into modules, and list them all.

A layer path is dotted from the model's root. Integer parts index into containers and
negative ones count from the end (``layer3.-1`` is ``layer3.5`` in resnet50); a ``:K``
suffix picks the K-th call of a module the forward pass calls several times. Glob
patterns (``layer*.0.conv2``) and ``--layer-type Conv2d`` select several modules. The
path is parsed and looked up child by child; nothing is ever ``eval``-ed.
"""

from __future__ import annotations

import fnmatch
import glob
import re
from collections.abc import Sequence
from dataclasses import dataclass

from .errors import UnknownLayerError, UsageError, describe, did_you_mean

_CALL_SUFFIX = re.compile(r"^(?P<path>.*?):(?P<call>-?\d+)$")


@dataclass(frozen=True)
class LayerSpec:
    """One selected module.

    Attributes:
        requested: what the user asked for (``layer3.-1``, a pattern, ``type:Conv2d``).
        path: the canonical dotted path (``layer3.5``).
        call: which call of the module to keep, or ``None`` for every call.
        module_type: the module's class name.
    """

    requested: str
    path: str
    call: int | None
    module_type: str


@dataclass(frozen=True)
class LayerInfo:
    """One row of ``hookviz layers``."""

    path: str
    module_type: str
    output_shapes: tuple[tuple[int, ...] | None, ...]  # one per call
    parameters: int

    @property
    def calls(self) -> int:
        return len(self.output_shapes)


def module_paths(model) -> list[str]:
    return [name for name, _ in model.named_modules() if name]


def resolve_path(model, text: str) -> LayerSpec:
    """Resolve one dotted path (with optional ``:K``) to a ``LayerSpec``.

    Raises:
        UnknownLayerError: no such module; the message suggests the closest names.
    """
    text = text.strip()
    match = _CALL_SUFFIX.match(text)
    path, call = (match["path"], int(match["call"])) if match else (text, None)
    if call is not None and call < 0:
        raise UnknownLayerError(f"--layer {text}: call index must be 0 or more")
    if not path:
        raise UnknownLayerError("--layer: empty layer path; `hookviz layers --model NAME` lists them")
    module = model
    canonical: list[str] = []
    for part in path.split("."):
        children = dict(module.named_children())
        key = part
        if part not in children and re.fullmatch(r"-?\d+", part):
            names = list(children)
            index = int(part)
            if -len(names) <= index < len(names) and names:
                key = names[index]
        if key not in children:
            where = ".".join(canonical) or "the model"
            options = [".".join(canonical + [c]) for c in children]
            hint = did_you_mean(".".join(canonical + [part]), options) or did_you_mean(path, module_paths(model))
            if not hint and options:
                shown = ", ".join(options[:8]) + (", ..." if len(options) > 8 else "")
                hint = f" ({where} has: {shown})"
            raise UnknownLayerError(
                f"--layer {text}: {where} has no child {part!r}{hint}; "
                "`hookviz layers --model NAME` lists every path"
            )
        module = children[key]
        canonical.append(key)
    return LayerSpec(requested=text, path=".".join(canonical), call=call, module_type=type(module).__name__)


def resolve_layers(model, requests: Sequence[str] = (), types: Sequence[str] = ()) -> list[LayerSpec]:
    """Resolve every ``--layer`` (paths and globs) and ``--layer-type``, in order, without repeats.

    Raises:
        UnknownLayerError: a path, pattern or type matches nothing.
    """
    specs: list[LayerSpec] = []
    modules = dict(model.named_modules())
    for request in requests:
        if glob.has_magic(request):
            match = _CALL_SUFFIX.match(request)
            pattern, call = (match["path"], int(match["call"])) if match else (request, None)
            hits = [p for p in modules if p and fnmatch.fnmatchcase(p, pattern)]
            if not hits:
                raise UnknownLayerError(
                    f"--layer {request}: pattern matches no module{did_you_mean(pattern, list(modules))}"
                )
            specs.extend(LayerSpec(request, p, call, type(modules[p]).__name__) for p in hits)
        else:
            specs.append(resolve_path(model, request))
    for type_name in types:
        hits = [p for p, m in modules.items() if p and _type_matches(m, type_name)]
        if not hits:
            present = sorted({type(m).__name__ for m in modules.values()})
            raise UnknownLayerError(
                f"--layer-type {type_name}: the model has no module of that type{did_you_mean(type_name, present)}"
            )
        specs.extend(LayerSpec(f"type:{type_name}", p, None, type(modules[p]).__name__) for p in hits)
    unique: dict[tuple[str, int | None], LayerSpec] = {}
    for spec in specs:
        unique.setdefault((spec.path, spec.call), spec)
    return list(unique.values())


def _type_matches(module, type_name: str) -> bool:
    cls = type(module)
    return type_name in (cls.__name__, f"{cls.__module__}.{cls.__name__}", f"nn.{cls.__name__}")


@dataclass(frozen=True)
class _Trace:
    shapes: dict  # path -> output shape per call
    order: list  # paths in the order their calls finished


def _run_traced(model, input_size: tuple[int, int]) -> _Trace:
    """Dry forward pass on a zero image, watching every module."""
    import torch

    from .recording import HookSet

    shapes: dict[str, list[tuple[int, ...] | None]] = {}
    order: list[str] = []
    with HookSet() as hooks:
        for path, module in model.named_modules():
            if not path:
                continue

            def hook(_module, _inputs, output, path=path):
                tensor = first_tensor(output)
                shapes.setdefault(path, []).append(tuple(tensor.shape) if tensor is not None else None)
                order.append(path)

            hooks.add(module.register_forward_hook(hook))
        try:
            with torch.no_grad():
                device = next(model.parameters(), torch.zeros(0)).device
                model(torch.zeros(1, 3, *input_size, device=device))
        except Exception as exc:  # the user's model is foreign code: any error means "can't trace"
            raise UsageError(
                f"the model failed a dry forward pass on a 1x3x{input_size[0]}x{input_size[1]} input "
                f"({describe(exc)}); try another --crop"
            ) from None
    return _Trace(shapes, order)


def trace(model, input_size: tuple[int, int] = (224, 224)) -> list[LayerInfo]:
    """Describe every module, in path order, from a dry forward pass on a zero image.

    Raises:
        UsageError: the model cannot run on a (1, 3, H, W) input.
    """
    shapes = _run_traced(model, input_size).shapes
    return [
        LayerInfo(
            path=path,
            module_type=type(module).__name__,
            output_shapes=tuple(shapes.get(path, [])),
            parameters=sum(p.numel() for p in module.parameters()),
        )
        for path, module in model.named_modules()
        if path
    ]


def default_layer(model, input_size: tuple[int, int] = (224, 224)) -> LayerSpec:
    """The last module, in the order calls finish, whose output is a 4-D map with more
    than one pixel: the usual Grad-CAM layer (resnet50: ``layer4``).

    Raises:
        UnknownLayerError: no module outputs a spatial map; pass --layer.
    """
    traced = _run_traced(model, input_size)
    shapes, order = traced.shapes, traced.order
    seen: dict[str, int] = {}
    best: tuple[str, int] | None = None
    for path in order:
        call = seen.get(path, 0)
        seen[path] = call + 1
        shape = shapes[path][call]
        if shape is not None and len(shape) == 4 and shape[2] * shape[3] > 1:
            best = (path, call)
    if best is None:
        raise UnknownLayerError("no module outputs a 4-D feature map; pass --layer (see `hookviz layers`)")
    path, call = best
    module = dict(model.named_modules())[path]
    return LayerSpec(
        requested="(default)",
        path=path,
        call=call if len(shapes[path]) > 1 else None,
        module_type=type(module).__name__,
    )


def first_tensor(value):
    """The first tensor in a module's output (a tensor, or one inside a tuple, list or dict)."""
    import torch

    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (tuple, list)):
        for item in value:
            found = first_tensor(item)
            if found is not None:
                return found
    if isinstance(value, dict):
        for item in value.values():
            found = first_tensor(item)
            if found is not None:
                return found
    return None
