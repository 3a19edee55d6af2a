"""How far to trust a map (``TrustOptions``): faithfulness measures and the randomisation check."""

from __future__ import annotations

from dataclasses import dataclass

from hookviz.errors import UsageError, arg

__all__ = ["TrustOptions"]


@dataclass(frozen=True)
class TrustOptions:
    """How far to trust each map (``hookviz.trust``); both cost many more forward passes.

    Attributes:
        faithfulness: measure each CAM's deletion and insertion curves (torch-cam's
            ``DeletionInsertionMetric``) and ROAD (pytorch-grad-cam's ``ROADCombined``)
            against the target class's probability.
        sanity: run the cascading model-parameter randomisation check (Adebayo et al. 2018)
            on each CAM.
        seed: the seed of ROAD's imputation noise and of the randomised layers.
    """

    faithfulness: bool = False
    sanity: bool = False
    seed: int = 0

    def __post_init__(self):
        for name in ("faithfulness", "sanity"):
            if not isinstance(getattr(self, name), bool):
                raise UsageError(f"{arg(name, getattr(self, name))}: give True or False")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < 2**63:
            raise UsageError(f"{arg('seed', self.seed)}: a seed is a whole number from 0 to 2**63 - 1")

    @property
    def any(self) -> bool:
        return self.faithfulness or self.sanity

    def to_json(self) -> dict:
        return {"faithfulness": self.faithfulness, "sanity": self.sanity, "seed": self.seed}
