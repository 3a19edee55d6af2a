"""The model-parameter randomisation check (Adebayo et al. 2018, "Sanity Checks for
Saliency Maps"), cascading from the output down.

On a deep copy of the model, the parametrised modules (those with parameters of their own)
are re-initialised one at a time from the output end (the last registered) down to the
input, each step keeping the ones before it random. After each step the same inputs and
targets are explained again and each map is compared with the original map by Spearman's
rank correlation (average ranks for ties). A map that explains the model changes as the
model's weights go; a map whose correlation stays above ``SANITY_THRESHOLD`` once every
layer is random shows the input (its edges, its contrast), not what the model learned.

Re-initialising is what quantus's ``MPRT`` does: the module's own ``reset_parameters()``
(a module without one gets its parameters drawn from N(0, 0.02), as timm's tokens are),
under random state of its own, seeded with ``seed``: the caller's random state is as it was.

Example::

    results = cascading_randomisation(model, lambda m: my_cams(m, inputs), my_cams(model, inputs))
    results[0].correlations[-1], results[0].explains_model
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import torch

__all__ = ["SANITY_THRESHOLD", "Randomisation", "cascading_randomisation", "parametrised_modules", "spearman"]

#: A map whose rank correlation with the original is still above this once every layer is
#: random "barely changes". Adebayo et al.'s guided back-propagation stays near 1; their
#: gradient and Grad-CAM fall towards 0 within the top few blocks.
SANITY_THRESHOLD = 0.5


@dataclass(frozen=True)
class Randomisation:
    """What one image's map did as the model's layers were randomised, output end first.

    Attributes:
        layers: the parametrised modules, in the order they were re-initialised; after step
            ``k`` the first ``k + 1`` of them are random.
        correlations: Spearman's rank correlation of the map after each step with the
            original (``None``: the map became constant, which is a change too).
        threshold: the correlation above which the map "barely changed".
        maps: the original map, then the map after each step (``1 + len(layers)``, h, w).
    """

    layers: tuple[str, ...]
    correlations: tuple[float | None, ...]
    threshold: float = SANITY_THRESHOLD
    maps: np.ndarray | None = field(default=None, repr=False, compare=False)

    @property
    def final(self) -> float | None:
        """The correlation once every layer is random."""
        return self.correlations[-1] if self.correlations else None

    @property
    def explains_model(self) -> bool:
        """Whether the map changed (its final correlation is at most ``threshold``)."""
        return self.final is None or self.final <= self.threshold

    @property
    def verdict(self) -> str:
        """The check's outcome, in words."""
        if self.explains_model:
            final = "a constant map" if self.final is None else f"rank correlation {self.final:.2f}"
            return (
                f"passes: with all {len(self.layers)} parametrised layers random the map changes "
                f"({final}, at most {self.threshold:g}), so it depends on what the model learned"
            )
        return (
            f"fails: with all {len(self.layers)} parametrised layers random the map keeps rank correlation "
            f"{self.final:.2f} (above {self.threshold:g}) with the original: it shows the input more than "
            "the model"
        )

    def to_json(self) -> dict:
        return {
            "explains_model": self.explains_model,
            "final_correlation": self.final,
            "threshold": self.threshold,
            "verdict": self.verdict,
            "layers": list(self.layers),
            "correlations": list(self.correlations),
        }


def parametrised_modules(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """The modules with parameters of their own, in registration order (the root counts as
    ``""`` when it holds parameters itself)."""
    return [(name, module) for name, module in model.named_modules() if any(True for _ in module.parameters(recurse=False))]


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
    """
    import copy

    import numpy as np

    original = maps.detach().float().cpu().numpy()
    randomised = copy.deepcopy(model)
    layers = list(reversed(parametrised_modules(randomised)))
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
        )
        for i in range(len(original))
    )


def _reinitialise(module) -> None:
    import torch

    with torch.no_grad():
        if callable(getattr(module, "reset_parameters", None)):
            module.reset_parameters()
            return
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
