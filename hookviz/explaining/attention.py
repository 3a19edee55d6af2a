"""The attention pass: every attention block's probabilities for a batch, and their
gradients, for the methods that read a vision transformer's attention (``needs_attention``).

It runs the caller's model as the pass left it (eval mode, parameters frozen), with its fused
attention switched off and hooks on its attention blocks only for the pass
(``hookviz.anatomy.attention.attention_recorded``), and leaves everything as it found it.
One pass serves every method of a batch that asks for the same thing: the probabilities
(one forward pass, no graph), their gradient for the target's score (one forward and one
backward pass per CAM key) or each block's own score's (LeGrad's, the same).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hookviz.anatomy.attention import AttentionMaps, attention_recorded
from hookviz.errors import UsageError

__all__ = ["AttentionPass", "GRADIENT_KINDS"]

#: What ``attention(gradients=...)`` may ask for besides the probabilities alone (``None``).
GRADIENT_KINDS = ("target", "layers")


@dataclass(frozen=True)
class AttentionPass:
    """``attention(gradients=None)``: the batch's ``AttentionMaps`` for one CAM key.

    Attributes:
        samples, scorer: as ``tasks.base.Rescoring``'s (``samples`` runs the task's forward).
        sites: the model's ``AttentionSite``s.
        batch: the batch's main inputs (N, C, H, W), on the model's device.
        prefix: the tokens before the patch tokens, as the model declares them, or ``None``.
        class_token: whether the first token is a class token.
        shared: the probabilities alone, shared by every key's pass (they do not depend on it).
    """

    samples: Any
    scorer: Any
    sites: tuple
    batch: Any
    prefix: int | None = None
    class_token: bool = True
    shared: dict = field(default_factory=dict, compare=False, repr=False)
    found: dict = field(default_factory=dict, compare=False, repr=False)

    def __call__(self, gradients: str | None = None) -> AttentionMaps:
        if gradients is not None and gradients not in GRADIENT_KINDS:
            raise ValueError(f"attention: gradients={gradients!r}; choose None, {' or '.join(map(repr, GRADIENT_KINDS))}")
        cache = self.shared if gradients is None else self.found
        if gradients not in cache:
            cache[gradients] = self._pass(gradients)
        return cache[gradients]

    def _pass(self, gradients: str | None) -> AttentionMaps:
        import torch

        count = len(self.batch)
        graph = torch.enable_grad() if gradients else torch.no_grad()
        recording = attention_recorded(self.samples.module, self.sites, layers=gradients == "layers")
        with torch.inference_mode(False), graph, recording as seen:
            # The parameters are frozen: the graph starts at the input.
            inputs = self.batch.detach().clone().requires_grad_(gradients is not None)
            output = self.samples.forward(main=inputs)
            probabilities = tuple(seen.probabilities)
            _check_shapes(probabilities, self.sites, count)
            found = None
            if gradients is not None:
                rows = torch.arange(count).repeat(len(self.sites) if gradients == "layers" else 1)
                found = _gradients(self.scorer(output, rows), probabilities)
        return AttentionMaps(tuple(p.detach().float() for p in probabilities), found, self.prefix, self.class_token)


def _check_shapes(probabilities, sites, count: int) -> None:
    """Refuse attention that is not one (N, heads, T, T) matrix per image and block over the
    same T tokens (Swin's windows, a pyramid's shrinking token counts)."""
    if len(probabilities) != len(sites):
        raise UsageError(
            f"{len(sites)} attention blocks were found but {len(probabilities)} called; the attention methods need each once"
        )
    tokens = probabilities[0].shape[-1]
    for site, found in zip(sites, probabilities):
        if found.dim() != 4 or found.shape[0] != count or tuple(found.shape[2:]) != (tokens, tokens):
            raise UsageError(
                f"{site.path} attends as {'x'.join(map(str, found.shape))} for {count} image(s), not over the same "
                f"{tokens} tokens per image in every block (windows, or a pyramid); the attention methods cannot read it"
            )


def _gradients(scores, probabilities) -> tuple:
    """d(sum of ``scores``)/d(each block's probabilities); zeros where nothing reaches them."""
    import torch

    if not scores.requires_grad:  # nothing to explain in these images
        return tuple(torch.zeros_like(p, dtype=torch.float32) for p in probabilities)
    found = torch.autograd.grad(scores.sum(), probabilities, allow_unused=True)
    return tuple(
        torch.zeros_like(p, dtype=torch.float32) if g is None else g.detach().float() for p, g in zip(probabilities, found)
    )
