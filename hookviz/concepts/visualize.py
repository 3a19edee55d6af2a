"""Feature visualisation: an input optimised to excite one channel of a layer, as Lucid
(Olah et al. 2017) makes it, MACO (Fel et al. 2023) refines it and the ``horama`` package
implements it.

The image is not optimised pixel by pixel (which finds high-frequency noise that excites
the channel and means nothing) but through a parametrisation that favours natural images:

- **Fourier space**: the parameters are the image's 2-D spectrum, each frequency scaled by
  ``1 / frequency ** decay``, so that a step of the optimiser moves low frequencies as much as
  high ones, as natural images' spectra fall off;
- **decorrelated colour**: the three channels are ImageNet's colour components (the square
  root of its colour covariance, Lucid's ``color_correlation_svd_sqrt``), turned to RGB and
  squashed into 0..1 by a sigmoid, then normalised as the model expects;
- **jitter**: each step sees the image shifted by up to ``jitter`` pixels and scaled by a few
  per cent, so that the channel must fire wherever the pattern lies.

The objective is the channel's mean over its positions (Lucid's ``channel`` objective). The
result is measured as the atlas ranks: the channel's maximum (or mean) over positions on the
final image, quantised to the 8-bit PNG that is saved, next to the channel's best dataset
example (``Visualization.ratio``). The pass stops at the layer: nothing after it runs.

On a CPU this takes seconds to minutes per channel: ``steps`` and ``seconds`` bound it, and
``progress`` is told each step.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hookviz.errors import UsageError, arg

__all__ = ["VisualizeSettings", "Visualization", "visualize_channel", "visualize_atlas", "COLOR_CORRELATION"]

#: Lucid's square root of ImageNet's colour covariance (its ``color_correlation_svd_sqrt``).
COLOR_CORRELATION = ((0.26, 0.09, 0.02), (0.27, 0.00, -0.05), (0.27, -0.09, 0.03))
_SCALES = (0.95, 0.975, 1.0, 1.025, 1.05)


@dataclass(frozen=True)
class VisualizeSettings:
    """How long and how an input is optimised.

    Attributes:
        steps: optimiser steps at most (Adam).
        seconds: wall-clock bound per channel; ``None``: none but ``steps``.
        learning_rate: Adam's.
        decay: the spectrum's fall-off (1: Lucid's).
        jitter: the largest shift, in pixels, each step's image is given.
        seed: seeds the spectrum's start and the jitter (the caller's random stream is left as it was).
        start: the spread of the spectrum's random start: 0.05, where Lucid's 0.01 (a nearly grey image) leaves a
            channel that is silent on grey without a gradient (Lucid overrides ReLUs' gradients for that).
    """

    steps: int = 256
    seconds: float | None = None
    learning_rate: float = 0.05
    decay: float = 1.0
    jitter: int = 8
    seed: int = 0
    start: float = 0.05

    def __post_init__(self):
        if not (isinstance(self.steps, int) and self.steps >= 1):
            raise UsageError(f"{arg('visualize_steps', self.steps)}: give a whole number of steps, 1 or more")
        if self.seconds is not None and not self.seconds > 0:
            raise UsageError(f"{arg('visualize_seconds', self.seconds)}: give a positive number of seconds")


@dataclass(frozen=True)
class Visualization:
    """One channel's optimised input.

    Attributes:
        channel: the channel's index.
        image: (H, W, 3) uint8, the input as saved.
        activation: the channel's maximum (or mean, ``rank``) over positions on ``image``.
        best_example: the same statistic on the channel's best dataset example, when given.
        ratio: ``activation / best_example`` (``None`` without a positive best example).
        steps: the steps taken; ``stopped``: why it stopped before ``steps`` (the time bound), else ``None``.
        seconds: how long it took.
    """

    channel: int
    image: np.ndarray
    activation: float
    best_example: float | None
    ratio: float | None
    steps: int
    seconds: float
    rank: str = "max"
    stopped: str | None = None

    def __repr__(self) -> str:
        times = f", {self.ratio:.2f}x the best example" if self.ratio is not None else ""
        return f"Visualization(channel {self.channel}: {self.rank} {self.activation:.4g}{times}, {self.steps} steps)"


class _Reached(Exception):
    """Raised by the layer's hook: the rest of the model need not run."""


def _spectrum_scale(height: int, width: int, decay: float):
    import torch

    fy = np.fft.fftfreq(height)[:, None]
    fx = np.fft.rfftfreq(width)[None, :]
    frequencies = np.sqrt(fx * fx + fy * fy)
    scale = 1.0 / np.maximum(frequencies, 1.0 / max(height, width)) ** decay
    return torch.as_tensor(scale, dtype=torch.float32)  # with an orthonormal inverse FFT, as torch-lucent's


def _to_rgb(spectrum, scale, size: tuple[int, int]):
    """The parameters (3, h, w', 2) -> an RGB image (1, 3, h, w) in 0..1."""
    import torch

    complex_spectrum = torch.view_as_complex(spectrum) * scale
    image = torch.fft.irfftn(complex_spectrum, s=size, norm="ortho") / 4.0
    colors = torch.tensor(COLOR_CORRELATION, dtype=image.dtype, device=image.device)
    colors = colors / colors.norm(dim=0).max()
    image = torch.einsum("ij,jhw->ihw", colors, image)
    return torch.sigmoid(image)[None]


def _jittered(image, shift: int, generator):
    import torch
    import torch.nn.functional as F

    if shift:
        padded = F.pad(image, (shift,) * 4, mode="reflect")
        dy, dx = (int(v) for v in torch.randint(0, 2 * shift + 1, (2,), generator=generator))
        image = padded[..., dy : dy + image.shape[-2], dx : dx + image.shape[-1]]
    factor = _SCALES[int(torch.randint(0, len(_SCALES), (1,), generator=generator))]
    if factor != 1.0:
        image = F.interpolate(image, scale_factor=factor, mode="bilinear", align_corners=False)
    return image


def _adam(parameter, rate: float, betas=(0.9, 0.999), eps: float = 1e-8):
    """Adam's ascent step on ``parameter``, written out: ``torch.optim``'s first optimiser of a
    process imports ``torch._dynamo`` (5 s on a CPU), for a few lines of arithmetic."""
    import torch

    first, second = torch.zeros_like(parameter), torch.zeros_like(parameter)

    def step(gradient, count: int) -> None:
        with torch.no_grad():
            first.mul_(betas[0]).add_(gradient, alpha=1 - betas[0])
            second.mul_(betas[1]).addcmul_(gradient, gradient, value=1 - betas[1])
            corrected = first / (1 - betas[0] ** count)
            spread = (second / (1 - betas[1] ** count)).sqrt_().add_(eps)
            parameter.add_(rate * corrected / spread)

    return step


def _channel_output(model, module, image, channel: int, call: int = 0):
    """The layer's output at its ``call``-th call for ``image``, at ``channel``, (1, *grid), with
    the pass stopped there."""
    from hookviz.hooks import HookSet

    seen: dict = {"calls": 0}

    def grab(_module, _inputs, output):
        seen["calls"] += 1
        if seen["calls"] <= call:
            return
        seen["output"] = output[0] if isinstance(output, tuple) else output
        raise _Reached

    with HookSet() as hooks:
        hooks.add(module.register_forward_hook(grab))
        try:
            model(image)
        except _Reached:
            pass
    if "output" not in seen:
        raise UsageError("the layer did not run in the model's forward pass; pick another layer")
    output = seen["output"]
    if output.dim() < 3 or not 0 <= channel < output.shape[1]:
        raise UsageError(f"{arg('visualize', channel)}: the layer's output {tuple(output.shape)} has no channel {channel}")
    return output[:, channel]


def visualize_channel(
    model,
    layer: str,
    channel: int,
    *,
    size: tuple[int, int],
    mean: Sequence[float],
    std: Sequence[float],
    settings: VisualizeSettings = VisualizeSettings(),
    rank: str = "max",
    best_example: float | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Visualization:
    """An input of ``size`` optimised to excite ``channel`` of ``layer`` (see the module's docstring).

    Args:
        model: the ``torch.nn.Module`` (left as it was: its mode and parameter flags).
        layer: the layer's path; its output must be channels-first, (1, C, ...).
        size: the input's (height, width).
        mean, std: the model's normalisation.
        rank: ``max`` or ``mean``: how the result is measured, as the atlas ranks.
        best_example: the channel's best dataset example's score by ``rank``, for the ratio.
        progress: called with (step, steps) after each step.

    Raises:
        UsageError: a layer that does not run, or a channel it lacks.
    """
    import torch

    from hookviz.anatomy.layers import resolve_path
    from hookviz.modelstate import evaluation, frozen_parameters

    spec = resolve_path(model, layer)
    module = dict(model.named_modules())[spec.path]
    with evaluation(model), frozen_parameters(model), torch.enable_grad():
        return _optimised(model, (module, spec.call or 0), channel, size, mean, std, settings, rank, best_example, progress)


def _optimised(model, where, channel, size, mean, std, settings, rank, best_example, progress) -> Visualization:
    import torch

    generator = torch.Generator().manual_seed(settings.seed)  # on the CPU: the same start on every device
    device = next(model.parameters(), torch.zeros(0)).device
    height, width = size
    spectrum = (settings.start * torch.randn(3, height, width // 2 + 1, 2, generator=generator)).to(device).requires_grad_(True)
    scale = _spectrum_scale(height, width, settings.decay).to(device)
    shift = torch.tensor(mean, dtype=torch.float32, device=device)[:, None, None]
    spread = torch.tensor(std, dtype=torch.float32, device=device)[:, None, None]
    step = _adam(spectrum, settings.learning_rate)
    start, steps, stopped = time.perf_counter(), 0, None
    for steps in range(1, settings.steps + 1):
        image = _jittered(_to_rgb(spectrum, scale, size), settings.jitter, generator)
        objective = _channel_output(model, where[0], (image - shift) / spread, channel, where[1]).mean()
        (gradient,) = torch.autograd.grad(objective, [spectrum])
        step(gradient, steps)
        if progress is not None:
            progress(steps, settings.steps)
        if settings.seconds is not None and time.perf_counter() - start > settings.seconds and steps < settings.steps:
            stopped = f"stopped after {steps} of {settings.steps} steps: the {settings.seconds:g} s bound"
            break
    with torch.no_grad():
        pixels = (_to_rgb(spectrum, scale, size)[0] * 255).round().clamp(0, 255).to(torch.uint8)
        saved = pixels.float().div(255)[None]
        output = _channel_output(model, where[0], (saved - shift) / spread, channel, where[1])
        value = float(output.amax() if rank == "max" else output.mean())
    ratio = value / best_example if best_example is not None and best_example > 0 else None
    image = pixels.permute(1, 2, 0).cpu().numpy()
    return Visualization(channel, image, value, best_example, ratio, steps, time.perf_counter() - start, rank, stopped)


def visualize_atlas(
    model,
    document: dict,
    folder: Path,
    count: int,
    *,
    size: tuple[int, int],
    mean: Sequence[float],
    std: Sequence[float],
    settings: VisualizeSettings = VisualizeSettings(),
    progress: Callable[[str], None] | None = None,
) -> dict:
    """``document`` (an atlas.json, ``hookviz/atlas/1``) with a ``visualization`` for the ``count``
    channels of each layer whose best example scored highest: the optimised input, saved as
    ``visualizations/<layer>/<channel>.png`` in ``folder``, and how much more it excites the
    channel than that example (measured as the atlas ranks: ``document["rank"]``).

    Args:
        progress: told a line at each quarter of a channel's steps, and one per channel done
            (``layer channel i: 2.4x its best example, 256 steps, 31 s``).

    Returns:
        A new document; ``document`` is left as it was.
    """
    from hookviz.store.files import atomic_write
    from hookviz.store.folders import layer_stems

    rank = "mean" if document.get("rank") == "mean" else "max"
    layers = []
    stems = layer_stems([layer["name"] for layer in document.get("layers", [])])
    for layer in document.get("layers", []):
        stem = stems[layer["name"]]
        items = list(layer.get("items", []))
        best = {item["index"]: item["top"][0]["score"] for item in items if item.get("top")}
        chosen = sorted(best, key=lambda i: (-best[i], i))[:count]
        for index in chosen:
            found = visualize_channel(
                model, layer["name"], index, size=size, mean=mean, std=std, settings=settings, rank=rank,
                best_example=best[index], progress=_quarters(progress, f"{layer['name']} channel {index}"),
            )  # fmt: skip
            relative = f"visualizations/{stem}/{index}.png"
            atomic_write(folder / relative, _png(found.image))
            items[index] = {**items[index], "visualization": _record(found, relative)}
            if progress is not None:
                progress(f"{layer['name']} channel {index}: {_said(found)}")
        layers.append({**layer, "items": items})
    return {**document, "layers": layers}


def _quarters(progress: Callable[[str], None] | None, where: str) -> Callable[[int, int], None] | None:
    """A step callback that tells ``progress`` a line at each quarter of the steps, the last left to the result's line."""
    if progress is None:
        return None

    def told(step: int, steps: int) -> None:
        if step < steps and step % max(1, steps // 4) == 0:
            progress(f"{where}: step {step} of {steps}")

    return told


def _record(found: Visualization, image: str) -> dict:
    return {
        "image": image,
        "activation": found.activation,
        "best_example": found.best_example,
        "ratio": found.ratio,
        "steps": found.steps,
        "seconds": round(found.seconds, 3),
        "stopped": found.stopped,
    }


def _said(found: Visualization) -> str:
    times = f"{found.ratio:.2f}x its best example" if found.ratio is not None else f"{found.rank} {found.activation:.4g}"
    return f"{times}, {found.steps} steps, {found.seconds:.0f} s" + (f" ({found.stopped})" if found.stopped else "")


def _png(image: np.ndarray) -> bytes:
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    return buffer.getvalue()
