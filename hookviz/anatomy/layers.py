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
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from hookviz.anatomy.featuremaps import DeclaredLayout
from hookviz.errors import UnknownLayerError, UsageError, arg, describe, did_you_mean, hint
from hookviz.hooks import HookSet

__all__ = [
    "LayerSpec",
    "LayerInfo",
    "resolve_path",
    "resolve_layers",
    "trace",
    "photo_failure",
    "list_layers",
    "default_layer",
    "dry_output",
    "first_tensor",
    "module_paths",
]

_CALL_SUFFIX = re.compile(r"^(?P<path>.*?):(?P<call>-?\d+)$")


@dataclass(frozen=True)
class LayerSpec:
    """One selected module.

    Attributes:
        requested: what the user asked for (``layer3.-1``, a pattern, ``type:Conv2d``).
        path: the canonical dotted path (``layer3.5``).
        call: which call of the module to keep, or ``None`` for every call.
        module_type: the module's class name.
        explicit: named by its own path (not by a pattern or a type): a module named so that
            never runs is an error; one a pattern or type selected is skipped with a note.
    """

    requested: str
    path: str
    call: int | None
    module_type: str
    explicit: bool = True

    @property
    def label(self) -> str:
        """``path`` or ``path:call``, as reports and messages name it."""
        return self.path if self.call is None else f"{self.path}:{self.call}"


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
        raise UnknownLayerError(f"{arg('layers', text)}: call index must be 0 or more")
    if not path:
        raise UnknownLayerError(f"{arg('layers', text)}: empty layer path; {hint('list_layers')}")
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
            suggestion = did_you_mean(".".join(canonical + [part]), options) or did_you_mean(path, module_paths(model))
            if not suggestion and options:
                shown = ", ".join(options[:8]) + (", ..." if len(options) > 8 else "")
                suggestion = f" ({where} has: {shown})"
            raise UnknownLayerError(f"{arg('layers', text)}: {where} has no child {part!r}{suggestion}; {hint('list_layers')}")
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
                    f"{arg('layers', request)}: pattern matches no module{did_you_mean(pattern, list(modules))}"
                )
            specs.extend(LayerSpec(request, p, call, type(modules[p]).__name__, explicit=False) for p in hits)
        else:
            specs.append(resolve_path(model, request))
    for type_name in types:
        hits = [p for p, m in modules.items() if p and _type_matches(m, type_name)]
        if not hits:
            present = sorted({type(m).__name__ for m in modules.values()})
            raise UnknownLayerError(
                f"{arg('layer_types', type_name)}: the model has no module of that type{did_you_mean(type_name, present)}"
            )
        specs.extend(LayerSpec(f"type:{type_name}", p, None, type(modules[p]).__name__, explicit=False) for p in hits)
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
    starts: list  # paths in the order their calls began
    output: object = None  # the model's own output
    size: tuple[int, ...] = (224, 224)  # the spatial size of the zero input it ran on


def dry_output(model, input_size: tuple[int, int], channels: int = 3, blank: tuple | None = None):
    """The model's output on a blank (zero) photo, computed without gradients in eval mode;
    ``blank``: the model's positional inputs instead (a sample kind's blank sample)."""
    return _run_traced(model, input_size, channels, watch=False, blank=blank).output


#: The frames of the zero clip a model of clips or volumes (its stem a Conv3d) is traced on.
DRY_FRAMES = 8


def dry_size(model, input_size: tuple[int, int]) -> tuple[int, ...]:
    """The spatial size of the zero input a dry pass feeds ``model``: ``input_size`` for a
    model of photos, its width for one of signals, ``DRY_FRAMES`` frames of it for one of clips."""
    from hookviz.modelstate import input_rank

    rank = input_rank(model)
    return (input_size[-1],) if rank == 1 else (DRY_FRAMES, *input_size) if rank == 3 else tuple(input_size)


def photo_failure(model, input_size: tuple[int, int], channels: int = 3) -> str | None:
    """Why ``model`` fails on a zero photo of ``input_size`` (its error, in one line), or ``None``
    when it runs; its mode and parameters are left as they were."""
    import torch

    from hookviz.modelstate import evaluation, model_dtype

    device = next(model.parameters(), torch.zeros(0)).device
    try:
        with torch.no_grad(), evaluation(model):
            model(torch.zeros(1, channels, *input_size, device=device, dtype=model_dtype(model)))
    except Exception as exc:  # the user's model is foreign code: any error means it takes no photo
        return describe(exc)
    return None


def _run_traced(model, input_size: tuple[int, int], channels: int = 3, watch: bool = True, blank: tuple | None = None) -> _Trace:
    """Dry forward pass on a zero image (or on ``blank``, the model's positional inputs: a
    sample kind's blank sample), watching every module (with ``watch``); the model's mode and
    parameters are left as they were. A model that fails on a photo and whose stem is a Conv1d
    or a Conv3d is traced on a zero signal or clip (``dry_size``): photos first, as a photo's
    model may reduce its rows and convolve them in 1-D."""
    size = tuple(blank[0].shape[2:]) if blank is not None else tuple(input_size)
    other = dry_size(model, input_size)
    try:
        return _traced_once(model, size, channels, watch, blank)
    except UsageError:
        if other == size or (blank is not None and len(blank) != 1):  # a kind of several inputs says what they are
            raise
    return _traced_once(model, other, channels, watch)


def _traced_once(model, size: tuple[int, ...], channels: int, watch: bool, blank: tuple | None = None) -> _Trace:
    import torch

    from hookviz.modelstate import evaluation

    shapes: dict[str, list[tuple[int, ...] | None]] = {}
    order: list[str] = []
    starts: list[str] = []
    with HookSet() as hooks:
        for path, module in model.named_modules():
            if not path or not watch:
                continue

            def hook(_module, _inputs, output, path=path):
                tensor = first_tensor(output)
                shapes.setdefault(path, []).append(tuple(tensor.shape) if tensor is not None else None)
                order.append(path)

            hooks.add(module.register_forward_pre_hook(lambda _m, _a, path=path: starts.append(path)))
            hooks.add(module.register_forward_hook(hook))
        try:
            with torch.no_grad(), evaluation(model):
                from hookviz.modelstate import model_dtype

                device = next(model.parameters(), torch.zeros(0)).device
                given = blank if blank is not None else (torch.zeros(1, channels, *size),)
                keywords = given[-1] if isinstance(given[-1], dict) else {}  # a kind's inputs passed by keyword
                cast = {"device": device, "dtype": model_dtype(model)}
                positional = [tensor.to(**cast) for tensor in given if not isinstance(tensor, dict)]
                output = model(*positional, **{name: tensor.to(**cast) for name, tensor in keywords.items()})
        except Exception as exc:  # the user's model is foreign code: any error means "can't trace"
            if blank is not None and len(blank) > 1:  # a sample of several inputs: say what each was
                raise UsageError(_inputs_failure(blank, exc)) from None
            raise UsageError(_dry_run_failure(model, size, channels, exc)) from None
    return _Trace(shapes, order, starts, output, size)


def _inputs_failure(blank: tuple, exc: Exception) -> str:
    """Why a model of several inputs failed on blank ones of their shapes, in one line."""
    given = [*(t for t in blank if not isinstance(t, dict)), *(t for d in blank if isinstance(d, dict) for t in d.values())]
    shapes = ", ".join("x".join(map(str, tensor.shape)) for tensor in given)
    return (
        f"the model failed a forward pass on blank inputs of these shapes ({shapes}) ({describe(exc)}); "
        "check the shape of each --input, or pass --aligned NAME for a map of the photo's size"
    )


def _dry_run_failure(model, input_size, channels: int, exc: Exception) -> str:
    """Why a model failed on a plain image, in one line that names what to change."""
    import torch.nn as nn

    shape = "x".join(map(str, (1, channels, *input_size)))
    first = next((m for m in model.modules() if isinstance(m, nn.Conv2d)), None)
    if first is not None and first.in_channels not in (1, 3):
        return (
            f"the model's first convolution takes {first.in_channels} channels; hookviz feeds photos as "
            f"RGB (3 channels) or grayscale (1), so it cannot run this model on images ({describe(exc)})"
        )
    return (
        f"the model failed a forward pass on a {shape} input ({describe(exc)}); "
        f"if it needs another input size, pass {arg('crop')}"
    )


def trace(model, input_size: tuple[int, int] = (224, 224), channels: int = 3, blank: tuple | None = None) -> list[LayerInfo]:
    """Describe every module, in path order, from a dry forward pass on a zero image (or on ``blank``).

    Raises:
        UsageError: the model cannot run on a (1, channels, H, W) input.
    """
    shapes = _run_traced(model, input_size, channels, blank=blank).shapes
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


def list_layers(model, input_size: tuple[int, int] = (224, 224), blank: tuple | None = None) -> list[LayerInfo]:
    """Every module path of ``model`` with its type, output shape per call and parameter
    count: the paths ``layers=`` (and ``hookviz run --layer``) take; ``blank``: the model's
    positional inputs to trace it on (a sample kind's blank sample) instead of a zero photo.
    A ``torch.compile`` wrapper's paths are those of the module it wraps, as ``explain`` takes them."""
    from hookviz.modelstate import compiled_original, input_channels

    model = compiled_original(model) or model
    return trace(model, input_size, input_channels(model), blank=blank)


SPATIAL_REASON = "the last layer with a spatial feature map"
BACKBONE_REASON = "the backbone's last feature map"
BACKBONE_COARSE_REASON = (
    "the backbone's last feature map of at least 7x7 pixels: its later ones, to {last}, are too coarse to show where"
)
TOKEN_GRID_REASON = "the last layer with a spatial feature map (here a grid of patch tokens)"
TRANSFORMER_REASON = "the first norm of the last transformer block, as pytorch-grad-cam recommends"
CLASS_TOKEN_REASON = (
    TRANSFORMER_REASON + ": when the head reads the class token, no patch token reaches it after the last block, "
    "so later layers' CAMs are empty"
)
_TOKEN_NORM = re.compile(r"(layer|rms)_?norm", re.IGNORECASE)


def default_layer(
    model,
    input_size: tuple[int, int] = (224, 224),
    channels: int = 3,
    declared: DeclaredLayout | None = None,
    root: str | None = None,
    blank: tuple | None = None,
) -> tuple[LayerSpec, str]:
    """The usual CAM layer, and why it was chosen.

    For a transformer (a block that begins with a LayerNorm over patch tokens: ViT, DeiT,
    Swin, BEiT, EVA) it is the last such block's first norm. Otherwise it is the last module,
    in the order calls finish, whose output for one image is a 4-D map with more than one
    pixel (resnet50: ``layer4``) or a grid of patch tokens (LeViT's last stage).

    Args:
        declared: what the model declares about its tokens (``geometry.declared_layout``);
            token grids it does not cover are recognised by their count.
        root: only modules inside it are considered (a detector's ``backbone.body``): the
            backbone's last feature map.
        blank: the model's positional inputs for the dry pass (a sample kind's blank
            sample); a zero photo of ``input_size`` by default.

    Raises:
        UnknownLayerError: no module outputs a spatial map or a token grid; name a layer.
    """
    traced = _run_traced(model, input_size, channels, blank=blank)
    size = traced.size  # a signal's (L,), a clip's (T, H, W): what the layouts read
    if root is not None:
        inside = lambda path: path.startswith(root + ".")  # noqa: E731
        traced = _Trace(
            traced.shapes, [p for p in traced.order if inside(p)], [p for p in traced.starts if inside(p)], size=traced.size
        )
    found = _last_block_first_norm(model, traced, size, declared)
    reason = TRANSFORMER_REASON if found is None else _why_transformer(traced.shapes[found[0]][found[1]], size, declared)
    if found is None:
        found, reason = (_backbone_map if root is not None else _last_spatial_map)(traced, size, declared)
    if found is None:
        if any(shape is not None and len(shape) == 4 for shapes in traced.shapes.values() for shape in shapes):
            height, width = input_size  # every map shrank to one pixel: the input is too small, not the model
            raise UnknownLayerError(
                f"every feature map is a single pixel at a {height}x{width} input, too small to show where; "
                f"pass a larger {arg('crop')} or {arg('resize')}, or {arg('layers')}"
            )
        raise UnknownLayerError(f"no module outputs a 4-D feature map; pass {arg('layers')} ({hint('list_layers')})")
    path, call = found
    module = dict(model.named_modules())[path]
    spec = LayerSpec(
        requested="(default)",
        path=path,
        call=call if len(traced.shapes[path]) > 1 else None,
        module_type=type(module).__name__,
    )
    return spec, reason


def _backbone_map(traced: _Trace, input_size, declared) -> tuple[tuple[str, int] | None, str]:
    """A backbone's last map, and the reason to give. A backbone may end in maps of a few pixels
    (SSD's 3x3 and 1x1; a segmenter's at a small ``--resize``), too coarse to show where: its last
    map of at least 7x7 is taken where it has one, and the reason says so."""
    last, _ = _last_spatial_map(traced, input_size, declared)
    found, _ = _last_spatial_map(traced, input_size, declared, min_side=7)
    if found is None or found == last:
        return last, BACKBONE_REASON
    assert last is not None  # a map of at least 7x7 is a map
    return found, BACKBONE_COARSE_REASON.format(last=last[0])


def _why_transformer(shape, input_size, declared) -> str:
    """The reason for a block's first norm: the class token's, when there is one."""
    from hookviz.anatomy.featuremaps import layout_of

    layout = layout_of(shape, input_size, declared)
    return CLASS_TOKEN_REASON if layout is not None and layout.prefix else TRANSFORMER_REASON


def _last_spatial_map(traced: _Trace, input_size, declared, min_side: int = 1) -> tuple[tuple[str, int] | None, str]:
    """The last call (in finish order) whose output is a map of one image (with sides of at
    least ``min_side``), and the reason to give."""
    from hookviz.anatomy.featuremaps import layout_of

    seen: dict[str, int] = {}
    best, reason = None, SPATIAL_REASON
    for path in traced.order:
        call = seen.get(path, 0)
        seen[path] = call + 1
        shape = traced.shapes[path][call]
        if shape is None or shape[0] != 1:  # a batch of windows (Swin, MaxViT) is not the image's map
            continue
        if len(shape) == 4 and shape[2] * shape[3] > 1 and min(shape[2], shape[3]) >= min_side:
            best, reason = (path, call), SPATIAL_REASON
        elif len(shape) in (3, 5):
            layout = layout_of(shape, input_size, declared)
            if layout is not None and layout.grid is None and math.prod(shape[2:]) > 1:  # a Conv1d's, a Conv3d's map
                best, reason = (path, call), SPATIAL_REASON
            elif layout is not None and layout.grid is not None and layout.grid[0] * layout.grid[1] > 1:
                best, reason = (path, call), TOKEN_GRID_REASON
    return best, reason


def _last_block_first_norm(model, traced: _Trace, input_size, declared) -> tuple[str, int] | None:
    """The last norm over the image's patch tokens that its block calls before any other
    child of the block puts out those tokens: ViT's ``norm1``, and TNT's, which its block
    calls after the norms of its inner pixel tokens (a batch of their own). A stage's
    closing norm (PVT's ``stages.3.norm``) comes after its blocks' tokens, and is not one."""
    from hookviz.anatomy.featuremaps import token_layout

    modules = dict(model.named_modules())
    calls: dict[str, int] = {}
    began: dict[str, int] = {}  # path -> where its latest call began
    spoken: dict[str, int] = {}  # parent -> the call (by where it began) in which a child put out the tokens
    convolved: dict[str, int] = {}  # parent -> the call in which a child put out a channels-first map
    best = None
    for position, path in enumerate(traced.starts):
        call = calls.get(path, 0)
        calls[path], began[path] = call + 1, position
        parent = path.rsplit(".", 1)[0] if "." in path else None
        if parent is None or parent not in began:
            continue
        shapes = traced.shapes.get(path) or [None]
        shape = shapes[min(call, len(shapes) - 1)]
        if shape is None or shape[0] != 1:
            continue
        if token_layout(shape, input_size, declared) is None:
            # A child that puts out a channels-first map first makes it a convolution block
            # (ConvNeXt's depthwise conv before its channels-last norm), not a transformer's.
            if len(shape) == 4:
                convolved[parent] = began[parent]
            continue
        # One image's tokens: a batch of windows or of inner pixel tokens is not the image's grid.
        first = spoken.get(parent) != began[parent] and convolved.get(parent) != began[parent]
        if first and _TOKEN_NORM.search(type(modules[path]).__name__):
            best = (path, call)
        spoken[parent] = began[parent]
    return best


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
