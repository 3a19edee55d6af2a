"""The model-parameter randomisation check (Adebayo et al. 2018, "Sanity Checks for
Saliency Maps"), cascading from the output down.

On a deep copy of the model, the modules with weights of their own (parameters, or a frozen
batch norm's buffers, as ``FrozenBatchNorm2d`` keeps them) are re-initialised one at a time
from the output end (the last registered) down to the input, each step keeping the ones
before it random. After each step the same inputs and targets are explained again and each
map is compared with the original map by Spearman's rank correlation (average ranks for
ties). A map that explains the model changes as the model's weights go; a map whose
correlation's absolute value stays above ``SANITY_THRESHOLD`` once every layer is random
shows the input (its edges, its contrast), not what the model learned. Adebayo et al. judge
the absolute value: a map whose ranks are turned upside down (-0.9) is still the input's.

Re-initialising is what quantus's ``MPRT`` does: the module's own ``reset_parameters()``
(a module without one gets its parameters drawn from N(0, 0.02), as timm's tokens are),
under random state of its own, seeded with ``seed``: the caller's random state is as it was.
A frozen batch norm (``torchvision.ops.FrozenBatchNorm2d``: its weight, bias and statistics
are buffers) is reset as ``BatchNorm2d.reset_parameters()`` resets its unfrozen form (weight
1, bias 0, mean 0, variance 1). Any other float buffer a checkpoint keeps is left as it
was, and the record names its module (``kept``): the check is then not over a wholly random
model.

A rank correlation over a handful of values says little (over 4 values it moves in steps of
0.2): a map of fewer than ``MIN_VALUES`` values gets a note.

Example::

    results = cascading_randomisation(model, lambda m: my_cams(m, inputs), my_cams(model, inputs))
    results[0].correlations[-1], results[0].explains_model
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import torch

__all__ = [
    "MIN_VALUES",
    "SANITY_THRESHOLD",
    "Randomisation",
    "cascading_randomisation",
    "copy_refusal",
    "kept_buffers",
    "parametrised_modules",
    "spearman",
]

#: A map whose rank correlation with the original is still above this once every layer is
#: random "barely changes". Adebayo et al.'s guided back-propagation stays near 1; their
#: gradient and Grad-CAM fall towards 0 within the top few blocks.
SANITY_THRESHOLD = 0.5

#: A map of fewer values than this (a 2x2 or 3x5 map) gets a note: its rank correlation,
#: over so few ranks, moves by large steps and says little.
MIN_VALUES = 16

# The buffers of a frozen batch norm (torchvision's and detectron2's FrozenBatchNorm2d), and
# what BatchNorm2d.reset_parameters() sets them to in the unfrozen form.
_FROZEN_NORM = {"weight": 1.0, "bias": 0.0, "running_mean": 0.0, "running_var": 1.0}


@dataclass(frozen=True)
class Randomisation:
    """What one image's map did as the model's layers were randomised, output end first.

    Attributes:
        layers: the modules with weights, in the order they were re-initialised; after step
            ``k`` the first ``k + 1`` of them are random.
        correlations: Spearman's rank correlation of the map after each step with the
            original (``None``: the map became constant, which is a change too).
        threshold: the absolute correlation above which the map "barely changed".
        maps: the original map, then the map after each step (``1 + len(layers)``, h, w).
        kept: the modules whose float buffers were left as they were (``kept_buffers``; their
            parameters, if any, are among ``layers``): the model was never wholly random.
        shape: the map's shape (h, w); ``()`` when not known.
    """

    layers: tuple[str, ...]
    correlations: tuple[float | None, ...]
    threshold: float = SANITY_THRESHOLD
    maps: np.ndarray | None = field(default=None, repr=False, compare=False)
    kept: tuple[str, ...] = ()
    shape: tuple[int, ...] = ()

    @property
    def final(self) -> float | None:
        """The correlation once every layer is random."""
        return self.correlations[-1] if self.correlations else None

    @property
    def explains_model(self) -> bool:
        """Whether the map changed: its final correlation's absolute value is at most
        ``threshold`` (Adebayo et al.: an inverted map still shows what the original did)."""
        return self.final is None or abs(self.final) <= self.threshold

    @property
    def note(self) -> str | None:
        """What to know before reading the verdict: a map of too few values for its rank
        correlation to mean much, or layers left as they were; ``None``: nothing."""
        said = []
        values = math.prod(self.shape) if self.shape else None
        if values is not None and values < MIN_VALUES:
            said.append(
                f"the map has only {values} values ({'x'.join(map(str, self.shape))}), fewer than {MIN_VALUES}: "
                "a rank correlation over so few moves in large steps and says little"
            )
        if self.kept:
            said.append(
                f"the float buffers of {_count(self.kept, 'module')} ({', '.join(self.kept)}) were left as they were: "
                "the model was never wholly random"
            )
        return "; ".join(said) or None

    @property
    def verdict(self) -> str:
        """The check's outcome, in words."""
        random = f"with all {len(self.layers)} layers with weights random"
        if self.kept:
            random += f" but the float buffers of {', '.join(self.kept)}"
        if self.explains_model:
            final = "a constant map" if self.final is None else f"rank correlation {self.final:.2f}"
            said = (
                f"passes: {random} the map changes ({final}, |ρ| at most {self.threshold:g}), "
                "so it depends on what the model learned"
            )
        else:
            inverted = "; an inverted map is still the same picture" if self.final is not None and self.final < 0 else ""
            said = (
                f"fails: {random} the map keeps rank correlation {self.final:.2f} with the original "
                f"(|ρ| above {self.threshold:g}{inverted}): it shows the input more than the model"
            )
        note = self.note
        return f"{said} (note: {note})" if note else said

    def to_json(self) -> dict:
        return {
            "explains_model": self.explains_model,
            "final_correlation": self.final,
            "threshold": self.threshold,
            "verdict": self.verdict,
            "note": self.note,
            "layers": list(self.layers),
            "kept": list(self.kept),
            "correlations": list(self.correlations),
        }


def _count(items, word: str) -> str:
    return f"{len(items)} {word}" if len(items) == 1 else f"{len(items)} {word}s"


def parametrised_modules(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """The modules with weights of their own that the check re-initialises, in registration
    order: those with parameters, and frozen batch norms (``FrozenBatchNorm2d``, whose weight,
    bias and statistics are buffers); the root counts as ``""`` when it holds some itself."""
    return [
        (name, module)
        for name, module in model.named_modules()
        if any(True for _ in module.parameters(recurse=False)) or _frozen_norm(module)
    ]


def kept_buffers(model: torch.nn.Module) -> list[str]:
    """The modules whose float buffers a checkpoint keeps (persistent ones) but the check
    leaves as they were: neither their ``reset_parameters()`` nor a frozen batch norm's reset
    covers them."""
    return [
        name or "(root)"
        for name, module in model.named_modules()
        if _float_buffers(module) and not callable(getattr(module, "reset_parameters", None)) and not _frozen_norm(module)
    ]


def _float_buffers(module) -> dict[str, torch.Tensor]:
    """``module``'s own persistent float buffers, by name."""
    return {
        name: buffer
        for name, buffer in module.named_buffers(recurse=False)
        if buffer.is_floating_point() and name not in module._non_persistent_buffers_set
    }


def _frozen_norm(module) -> bool:
    """Whether ``module`` is a batch norm whose weight, bias and statistics are buffers."""
    buffers = _float_buffers(module)
    return all(name in buffers for name in _FROZEN_NORM) and not any(True for _ in module.parameters(recurse=False))


def copy_refusal(model: torch.nn.Module) -> str | None:
    """Why ``model`` cannot be deep-copied, in words (``TypeError: cannot pickle '_thread.lock'
    object``), or ``None`` when it can. Only its structure is copied to find out: its
    parameters and buffers are shared with the trial copy, which is then dropped."""
    import copy

    memo = {id(tensor): tensor for tensor in (*model.parameters(), *model.buffers())}
    try:
        copy.deepcopy(model, memo)
    except Exception as exc:  # whatever an attribute's __deepcopy__ or __reduce__ raises
        return f"{type(exc).__name__}: {exc}"
    return None


def cascading_randomisation(
    model: torch.nn.Module,
    explain: Callable[[torch.nn.Module], torch.Tensor],
    maps: torch.Tensor,
    *,
    seed: int = 0,
    threshold: float = SANITY_THRESHOLD,
) -> tuple[Randomisation, ...]:
    """Cascading randomisation of ``model``'s layers, output end first.

    Args:
        model: the model; it is copied, never changed.
        explain: ``explain(model_copy)`` -> maps (N, h, w) of the same inputs and targets made
            with ``model_copy`` (the same method and layer as ``maps``; the layer is looked up
            by name in the copy).
        maps: the original maps (N, h, w).
        seed: the seed of the re-initialisation's random state.
        threshold: see ``SANITY_THRESHOLD``.

    Returns:
        one ``Randomisation`` per image, in order.

    Raises:
        UsageError: ``model`` cannot be deep-copied (it holds a lock, say).
    """
    import copy

    import numpy as np

    from hookviz.errors import UsageError

    original = maps.detach().float().cpu().numpy()
    try:
        randomised = copy.deepcopy(model)
    except Exception as exc:  # whatever an attribute's __deepcopy__ or __reduce__ raises
        raise UsageError(
            f"the randomisation check randomises a deep copy of the model, and {copy_words(model, exc)}; "
            "give the model a __deepcopy__ that copies its weights"
        ) from None
    layers = list(reversed(parametrised_modules(randomised)))
    kept = tuple(kept_buffers(randomised))
    steps: list[np.ndarray] = []
    with _own_random_state(randomised, seed):
        for _name, module in layers:
            _reinitialise(module)
            steps.append(explain(randomised).detach().float().cpu().numpy())
    names = tuple(name or "(root)" for name, _ in layers)
    return tuple(
        Randomisation(
            names,
            tuple(spearman(original[i], step[i]) for step in steps),
            threshold,
            np.stack([original[i], *[step[i] for step in steps]]),
            kept,
            tuple(original.shape[1:]),
        )
        for i in range(len(original))
    )


def copy_words(model, reason) -> str:
    """Says that ``model`` cannot be deep-copied, and why (an exception or its words)."""
    why = f"{type(reason).__name__}: {reason}" if isinstance(reason, BaseException) else reason
    return f"{type(model).__name__} cannot be deep-copied ({why})"


def _reinitialise(module) -> None:
    import torch

    with torch.no_grad():
        if callable(getattr(module, "reset_parameters", None)):
            module.reset_parameters()
            return
        if _frozen_norm(module):
            for name, value in _FROZEN_NORM.items():
                getattr(module, name).fill_(value)
        for parameter in module.parameters(recurse=False):
            torch.nn.init.normal_(parameter, std=0.02)


def _own_random_state(model, seed: int):
    """Random state of its own for the re-initialisation (CPU, and each CUDA device the
    model is on), restored afterwards. Only those generators are seeded: ``torch.manual_seed``
    would also reseed (lazily) every CUDA device's."""
    import contextlib

    import torch

    devices = sorted({p.device.index or 0 for p in model.parameters() if p.device.type == "cuda"})

    @contextlib.contextmanager
    def forked():
        with torch.random.fork_rng(devices=devices):
            torch.random.default_generator.manual_seed(seed)
            for device in devices:
                torch.cuda.default_generators[device].manual_seed(seed)
            yield

    return forked()


def spearman(a: np.ndarray, b: np.ndarray) -> float | None:
    """Spearman's rank correlation of two maps of one shape (average ranks for ties, as
    scipy's ``spearmanr``); ``None`` when either is constant."""
    import numpy as np

    x, y = _average_ranks(a.ravel()), _average_ranks(b.ravel())
    x, y = x - x.mean(), y - y.mean()
    scale = np.sqrt((x * x).sum() * (y * y).sum())
    return None if scale == 0 else float((x * y).sum() / scale)


def _average_ranks(values: np.ndarray) -> np.ndarray:
    import numpy as np

    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    return ((ends - counts + ends - 1) / 2.0)[inverse]
