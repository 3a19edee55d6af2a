"""Integrated gradients (Sundararajan et al. 2017): the input's difference from a baseline
times the gradient of the target's score averaged along the straight path between them. A
map at the input's resolution, one value per input channel:

    map = (x - b) * sum_k w_k dS/dx (b + a_k (x - b))

with ``--steps`` nodes ``a_k`` and weights ``w_k`` of the Gauss-Legendre rule on [0, 1],
captum's default. The baseline ``b`` (``--ig-baseline``): ``zero``, zeros in the model's
input space (the mean photo, after normalisation), as captum's default; ``blur``, the input
blurred by a Gaussian of sigma a tenth of its shorter side; ``mean``, each channel's mean.

The steps go through the model in passes of as many rows as the memory budget holds
(``hookviz.budget``), as captum's ``internal_batch_size`` chunks them by hand: 32 steps of a
resnet50 photo at once would hold 3.6 GB.

Completeness: a map sums to the score's change from the baseline, ``S(x) - S(b)``, as the
integral is exact; what the rule's steps miss is the map's *completeness error*, ``sum(map) -
(S(x) - S(b))``, captum's convergence delta. Each map reports it in ``report.json``
(``pixel_maps.integrated-gradients.figures``): ``steps``, ``map_sum``, ``score_change``,
``completeness_error`` and ``relative_error`` (the error over ``|S(x) - S(b)|``), from one
more forward pass of two rows per image (the input and its baseline). ``--steps auto`` climbs
a ladder of Gauss-Legendre rules (``AUTO_LADDER``: 4, 8, 16, ... steps) and keeps the first
whose relative error is under ``AUTO_TOLERANCE`` (1%); ``steps_tried`` counts every rung's steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hookviz.errors import UsageError, arg
from hookviz.methods.base import MapFigures, MethodContext, register_method
from hookviz.options.base import set_field
from hookviz.options.declared import check_values, option
from hookviz.workload import passed, work

__all__ = [
    "AUTO_LADDER",
    "AUTO_TOLERANCE",
    "DEFAULT_STEPS",
    "IGOptions",
    "IG_BASELINES",
    "MAX_STEPS",
    "integrated_gradients",
    "baseline",
    "gaussian_blur",
    "gauss_legendre",
]

#: What integrated gradients integrate from (``--ig-baseline``): zeros in the model's input
#: space (captum's default), the photo blurred, or the photo's mean colour.
IG_BASELINES = ("zero", "blur", "mean")
#: At most this many steps (``--steps``): each is a forward and backward pass of every image.
MAX_STEPS = 1024
#: The steps of the integral when none are asked for: ``--steps``, ``steps=`` of ``hookviz.explain``,
#: and a vision-language model's (``hookviz.vlm.explain.VlmRequest``).
DEFAULT_STEPS = 32
#: ``--steps auto``: the rules tried, fewest steps first, until one's completeness error is
#: under ``AUTO_TOLERANCE`` of the score's change (the last rung is kept when none is; all of
#: them together cost about as much as ``MAX_STEPS`` steps).
AUTO_LADDER = (4, 8, 16, 32, 64, 128, 256, 512)
#: ``--steps auto`` keeps the first rule whose |completeness error| is at most this share of
#: |S(x) - S(b)| (or at most ``_NOISE`` of the score's own size, where the change is nearly 0).
AUTO_TOLERANCE = 0.01
_NOISE = 1e-6


@dataclass(frozen=True)
class IGOptions:
    """Integrated gradients' settings (``--steps``, ``--ig-baseline``; ``steps=``, ``ig_baseline=``).

    Attributes:
        steps: the nodes of the integral (Gauss-Legendre, as captum's default rule).
        ig_baseline: what the path starts from: ``zero`` (zeros in the model's input space, as
            captum's default), ``blur`` (the input blurred) or ``mean`` (its mean per channel).
    """

    steps: int | str = option(
        DEFAULT_STEPS,
        help=f"Integrated gradients: steps of the integral (Gauss-Legendre, as captum's; 1 to {MAX_STEPS}), or auto "
        "(the fewest of 4, 8, 16, ... whose completeness error is under 1% of the score's change).",
        low=1,
        high=MAX_STEPS,
        words=("auto",),
    )
    ig_baseline: str = option(
        "zero",
        help="Integrated gradients: integrate from zero (zeros in the model's input space, as captum's), blur (the "
        "input blurred) or mean (its mean colour); a model of several inputs takes NAME=zero|blur|mean per input, "
        "comma-separated (zero,depth=blur).",
    )

    def __post_init__(self):
        steps = self.steps
        if isinstance(steps, str) and steps.strip().isdigit():  # the flag's text
            steps = int(steps.strip())
        elif isinstance(steps, str) and steps.strip().lower() == "auto":
            steps = "auto"
        if steps != "auto" and (isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= MAX_STEPS):
            raise UsageError(
                f"{arg('steps', self.steps)}: integrated gradients takes 1 to {MAX_STEPS} steps (each a forward and "
                f"backward pass of every image; {DEFAULT_STEPS} by default), or auto"
            )
        set_field(self, "steps", steps)
        self.baselines()  # first: a value of no baseline is refused naming the baselines, None too
        check_values(self)

    def baselines(self) -> tuple[str, dict[str, str]]:
        """The baseline of every input, and those of the inputs ``ig_baseline`` names (``zero,depth=blur``).

        Raises:
            UsageError: a baseline that is none of ``IG_BASELINES``, a name without one, or two
                baselines for one input (``zero,blur``, ``meta=mean,meta=zero``).
        """
        choose = f"{arg('ig_baseline', self.ig_baseline)}: choose {', '.join(IG_BASELINES)}"
        if not isinstance(self.ig_baseline, str):
            raise UsageError(choose)
        every: str | None = None
        named: dict[str, str] = {}
        for item in self.ig_baseline.split(","):
            name, given, which = (part.strip() for part in item.strip().rpartition("="))
            if which not in IG_BASELINES or (given and not name):
                raise UsageError(choose + (", or NAME=zero|blur|mean per input" if given or "," in self.ig_baseline else ""))
            if (named.get(name) if given else every) is not None:
                whose = f"input {name!r}" if given else "every input"
                raise UsageError(f"{arg('ig_baseline', self.ig_baseline)}: two baselines for {whose}; give one")
            if given:
                named[name] = which
            else:
                every = which
        return every or "zero", named


def _empty_path(image, settings: IGOptions) -> str | None:
    """A note when the baseline equals the input (a 1x1 input blurs to itself, a flat one is
    its own mean): the path between them is empty, so the map is zero everywhere."""
    which = settings.baselines()[0]
    tolerance = 1e-4 * max(1.0, float(image.abs().max()))
    if float((image - baseline(image, which)).abs().max()) > tolerance:  # the usual case: the other baselines are not made
        return None
    gaps = {name: float((image - baseline(image, name)).abs().max()) for name in IG_BASELINES}
    others = [str(arg("ig_baseline", name)) for name, gap in gaps.items() if gap > tolerance]
    advice = f"try {' or '.join(others)}" if others else "so does every other baseline"
    how, zero = ("equals", "zero") if gaps[which] == 0 else ("nearly equals", "close to zero")
    return f"the {which} baseline {how} the input, so integrated gradients are {zero} everywhere; {advice}"


@register_method(
    "integrated-gradients",
    needs_gradients=False,
    needs_input=True,
    needs_rescoring=True,
    needs_input_gradients=True,
    resolution="input",
    caveat=_empty_path,
    options=IGOptions,
)
def integrated_gradients(ctx: MethodContext):
    """Integrated gradients: the input's difference from a baseline times the path-averaged gradient."""
    import torch

    inputs, gradient, score = ctx.inputs, ctx.input_gradient, ctx.score
    assert inputs is not None and gradient is not None and score is not None  # the pass gives what the method declares
    settings = ctx.settings if isinstance(ctx.settings, IGOptions) else IGOptions()
    others = gradient.others()
    _check_named(settings, gradient.main, others)
    if others:  # a sample of several inputs: the path goes through all of them together, as captum's on a tuple
        return _through_every_input(inputs, others, gradient, settings)
    which = settings.baselines()[0]
    starts = torch.cat([baseline(inputs[n : n + 1], which) for n in range(len(inputs))])
    rows = torch.arange(len(inputs))
    ladder = AUTO_LADDER if settings.steps == "auto" else (int(settings.steps),)
    maps, figures = [], []
    # one image's steps at a time, which ctx.input_gradient takes in passes within the memory budget
    with work("integrated-gradients", len(inputs) * (sum(ladder) + 2), "steps", len(inputs), fed=True):
        ends = score(torch.cat([inputs, starts]), torch.cat([rows, rows])).double()  # S(x), then S(b): one pass
        changes = (ends[: len(inputs)] - ends[len(inputs) :]).tolist()
        for n in range(len(inputs)):
            found, tried = None, 0
            for steps in ladder:
                found = _path_map(gradient, inputs[n : n + 1], starts[n : n + 1], n, steps)
                tried += steps
                error = float(found.double().sum()) - changes[n]
                if _complete(error, changes[n], float(ends[n])):
                    break
            assert found is not None
            passed(sum(ladder) - tried)  # the rungs not climbed: the work is done
            maps.append(found)
            figures.append(_figures(float(found.double().sum()), changes[n], steps, tried))
    return MapFigures(torch.stack(maps), tuple(figures))


def _check_named(settings: IGOptions, main: str, others: dict) -> None:
    """Refuse a baseline named for an input the model does not take, or ``blur`` for a vector.

    Raises:
        UsageError: ``--ig-baseline nope=mean`` (no input ``nope``; a model of one input takes
            no names), or ``meta=blur`` on a vector input (no pixels to blur).
    """
    named = settings.baselines()[1]
    given = arg("ig_baseline", settings.ig_baseline)
    if named and not others:
        raise UsageError(f"{given}: the model takes one input; give one baseline for it ({', '.join(IG_BASELINES)})")
    for name, which in named.items():
        if name != main and name not in others:
            known = ", ".join(filter(None, (main, *others)))
            raise UsageError(f"{given}: the model takes no input {name!r}; name one of {known}")
        if which == "blur" and name in others and others[name].dim() <= 2:
            raise UsageError(f"{given}: input {name!r} is a vector, with no pixels to blur; choose zero or mean for it")


def _path_map(gradient, image, start, n: int, steps: int):
    """One image's map (C, *spatial) by the ``steps``-point Gauss-Legendre rule from ``start``."""
    import torch

    alphas, weights = gauss_legendre(steps)
    along = (-1,) + (1,) * (image.dim() - 1)  # a photo's (steps, 1, 1, 1), a signal's or a clip's too
    alphas_t = torch.tensor(alphas, dtype=image.dtype, device=image.device).reshape(along)
    weights_t = torch.tensor(weights, dtype=torch.float32, device=image.device).reshape(along)
    grads = gradient(start + alphas_t * (image - start), torch.full((steps,), n, dtype=torch.long))
    return (grads * weights_t).sum(dim=0) * (image[0] - start[0]).float()


def _complete(error: float, change: float, score: float) -> bool:
    """Whether a completeness ``error`` is within ``AUTO_TOLERANCE`` of the score's ``change``
    (or within float noise of the ``score``'s size, where the change is nearly nothing)."""
    return abs(error) <= max(AUTO_TOLERANCE * abs(change), _NOISE * max(1.0, abs(score)))


def _figures(total: float, change: float, steps: int, tried: int) -> dict[str, float]:
    """What report.json keeps about one map: its rule's steps (and every rung's, ``--steps auto``),
    its sum ``total`` (of every input's maps, for several), the score's change from the baseline,
    and the completeness error, also relative."""
    error = total - change
    return {
        "steps": float(steps),
        "steps_tried": float(tried),
        "map_sum": total,
        "score_change": change,
        "completeness_error": error,
        "relative_error": abs(error) / abs(change) if change != 0 else math.nan,
    }


def _through_every_input(inputs, others: dict, gradient, settings: IGOptions):
    """Integrated gradients of a sample of several inputs: every input moves from its baseline
    along the path at once (captum's ``IntegratedGradients`` on a tuple), each gets its map at its
    own shape, and each image's ``delta`` is the sum of every input's attributions less the
    score's rise from the baselines (captum's convergence delta: zero for an exact integral), its
    completeness error; ``--steps auto`` climbs ``AUTO_LADDER`` per image until it is small."""
    import torch

    every, named = settings.baselines()
    main = gradient.main  # the main input is "" below
    ladder = AUTO_LADDER if settings.steps == "auto" else (int(settings.steps),)
    main_maps, figures, maps = [], [], []
    cost = sum(steps + 2 for steps in ladder)  # each rung's steps and its path's two ends
    with work("integrated-gradients", len(inputs) * cost, "steps", len(inputs), fed=True):
        for n in range(len(inputs)):
            given = {"": inputs[n : n + 1], **{name: tensor[n : n + 1] for name, tensor in others.items()}}
            starts = {name: _start(tensor, named.get(name or main, every)) for name, tensor in given.items()}
            tried = 0
            for steps in ladder:
                found, (low, high) = _tuple_path(gradient, given, starts, n, steps)
                tried += steps
                total = sum(float(attribution.double().sum()) for attribution in found.values())
                if _complete(total - (high - low), high - low, high):
                    break
            passed(cost - tried - 2 * (ladder.index(steps) + 1))  # the rungs not climbed: the work is done
            main_maps.append(found.pop(""))
            shown = _figures(total, high - low, steps, tried)
            figures.append({**shown, "delta": shown["completeness_error"], "attribution_sum": total})
            maps.append({name: attribution.cpu().numpy() for name, attribution in found.items()})
    return MapFigures(torch.stack(main_maps), tuple(figures), tuple(maps))


def _tuple_path(gradient, given: dict, starts: dict, n: int, steps: int) -> tuple[dict, tuple[float, float]]:
    """One image's map of every input (``""`` the main one's) by the ``steps``-point Gauss-Legendre
    rule, all inputs along the path together, and the scores at its two ends, ``S(b)`` and ``S(x)``
    (two more rows of the same pass, weighed 0)."""
    import torch

    alphas, weights = gauss_legendre(steps)
    device = given[""].device
    alphas_t = torch.tensor([*alphas, 0.0, 1.0], dtype=given[""].dtype, device=device)
    weights_t = torch.tensor([*weights, 0.0, 0.0], dtype=torch.float32, device=device)
    paths = {}
    for name, tensor in given.items():
        along = (-1,) + (1,) * (tensor.dim() - 1)
        paths[name] = starts[name] + alphas_t.to(tensor.dtype).reshape(along) * (tensor - starts[name])
    main_path = paths.pop("")
    rows = torch.full((len(alphas_t),), n, dtype=torch.long)
    main_grads, other_grads, scores = gradient.along(main_path, paths, rows)
    found = {}
    for name, grads in {"": main_grads, **other_grads}.items():
        along = (-1,) + (1,) * (grads.dim() - 1)
        averaged = (grads * weights_t.reshape(along)).sum(dim=0)
        found[name] = averaged * (given[name][0] - starts[name][0]).float()
    return found, (float(scores[-2]), float(scores[-1]))


def _start(tensor, which: str):
    """An input's baseline: a photo's or a map's as ``baseline`` makes it; a vector's (no spatial
    axis) zeros, or with ``mean`` its features' mean."""
    import torch

    if tensor.dim() > 2:
        return baseline(tensor, which)
    if which == "mean":
        return tensor.mean(dim=-1, keepdim=True).expand_as(tensor).clone()
    return torch.zeros_like(tensor)


def gauss_legendre(steps: int) -> tuple[list[float], list[float]]:
    """The nodes in [0, 1] and weights (summing to 1) of ``steps``-point Gauss-Legendre."""
    import numpy as np

    nodes, weights = np.polynomial.legendre.leggauss(steps)
    return list(0.5 * (1 + nodes)), list(0.5 * weights)


def baseline(image, which: str):
    """The baseline of one input (1, C, *spatial): a photo's (1, C, H, W), a signal's (1, C, L) or
    a clip's (1, C, T, H, W): ``zero``, ``blur`` (a Gaussian along each spatial axis in turn, of
    sigma a tenth of the shortest; a clip's frames each blurred on their own, not across time) or
    ``mean`` (per channel over the whole input)."""
    import torch

    spatial = tuple(range(2, image.dim()))
    if which == "zero":
        return torch.zeros_like(image)
    if which == "mean":
        return image.mean(dim=spatial, keepdim=True).expand_as(image).clone()
    return gaussian_blur(image)


def gaussian_blur(image, sigma: float | None = None):
    """``image`` (N, C, *spatial: a photo's (N, C, H, W), a signal's (N, C, L), a clip's
    (N, C, T, H, W)) blurred by a Gaussian along each spatial axis in turn, its edges reflected;
    a clip's frames each on their own, not across time. ``sigma``: in samples, by default a
    tenth of the shortest side (at least 0.5), integrated gradients' ``blur`` baseline."""
    import torch
    import torch.nn.functional as F

    spatial = tuple(range(2, image.dim()))
    blurred_axes = spatial[-2:] if image.dim() == 5 else spatial  # a clip: each frame, not across time
    sides = [image.shape[axis] for axis in blurred_axes]
    sigma = max(0.1 * min(sides), 0.5) if sigma is None else sigma
    radius = min(math.ceil(3 * sigma), min(sides) - 1)
    offsets = torch.arange(-radius, radius + 1, dtype=image.dtype, device=image.device)
    kernel = torch.exp(-(offsets**2) / (2 * sigma**2))
    kernel = (kernel / kernel.sum()).reshape(1, 1, -1)
    blurred = image
    for axis in blurred_axes:  # separable: one axis at a time (a photo's rows, then its columns)
        moved = blurred.movedim(axis, -1)
        rows = F.pad(moved.reshape(-1, 1, moved.shape[-1]), (radius, radius), mode="reflect")
        blurred = F.conv1d(rows, kernel).reshape(moved.shape).movedim(-1, axis)
    return blurred
