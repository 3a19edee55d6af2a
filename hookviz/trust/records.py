"""What the trust measures found for one layer of one image, as ``LayerResult.trust`` holds it."""

from __future__ import annotations

from dataclasses import dataclass, field

from hookviz.trust.deletion import SATURATED, DeletionInsertion
from hookviz.trust.road import Road
from hookviz.trust.sanity import Randomisation

__all__ = ["LayerTrust"]


@dataclass(frozen=True)
class LayerTrust:
    """The trust measures of one layer's CAM of one image (``None``: not asked for).

    Attributes:
        score: what the faithfulness curves follow, in words (the task's ``probability``).
        deletion: RISE's deletion and insertion curves.
        road: ROAD's most- and least-relevant-first curves.
        sanity: the cascading randomisation check.
        methods: the trust measures of the layer's other methods' maps (``--cam a,b``), by
            method name, so that a run can rank and check each method; the main method's are
            this one's own (as before several methods were measured).
    """

    score: str | None = None
    deletion: DeletionInsertion | None = None
    road: Road | None = None
    sanity: Randomisation | None = None
    methods: dict[str, LayerTrust] = field(default_factory=dict)

    def notes(self, layer: str, main: str) -> tuple[str, ...]:
        """What to know before reading these measures of ``layer`` (``main``: this record's
        own method), one line each, naming no image, so that a run says each once: curves of a
        saturated probability, a map too small to rank, layers the check left as they were."""
        found = [(main, self), *self.methods.items()]
        said = []
        saturated = [method for method, each in found if each.deletion is not None and each.deletion.saturated]
        if saturated:
            said.append(
                f"{layer} ({', '.join(saturated)}): faithfulness: the target's probability is saturated (it stays at or "
                f"above {SATURATED} until every pixel is deleted): the deletion curve carries no information about the map"
            )
        by_note: dict[str, list[str]] = {}
        for method, each in found:
            if each.sanity is not None and each.sanity.note:
                by_note.setdefault(each.sanity.note, []).append(method)
        said += [f"{layer} ({', '.join(methods)}): randomisation check: {note}" for note, methods in by_note.items()]
        return tuple(said)

    def to_json(self) -> dict:
        document: dict = {}
        if self.deletion is not None or self.road is not None:
            document["faithfulness"] = {
                "score": self.score,
                "deletion_insertion": self.deletion.to_json() if self.deletion is not None else None,
                "road": self.road.to_json() if self.road is not None else None,
            }
        if self.sanity is not None:
            document["sanity"] = self.sanity.to_json()
        if self.methods:
            document["methods"] = {name: trust.to_json() for name, trust in self.methods.items()}
        return document
