"""The atlas's steps after its crops, each on atlas.json's document: names for the channels
(``--label-with open_clip:ARCH --vocabulary FILE``: CLIP-Dissect's SoftWPMI over each channel's
top crops, ``hookviz.concepts.naming``) and inputs optimised to excite the strongest channels
(``--visualize N``, ``hookviz.concepts.visualize``). What each needs is loaded and checked
before the atlas's pass (``prepare_concepts``), so that a missing vocabulary or missing weights
are said before any work, in one line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hookviz.errors import UsageError, arg

__all__ = ["prepare_concepts", "add_concepts"]


def prepare_concepts(request, kind_name: str) -> Any:
    """The ``ClipConcepts`` that will name the channels (``None`` without ``--label-with``).

    Raises:
        UsageError: an unreadable vocabulary, a spec that is no open_clip model, ``--visualize``
            with a model whose samples are not photos.
        WeightsError: the CLIP model's weights are not cached (one line: where to put them).
    """
    if request.visualize and kind_name != "photo":
        raise UsageError(
            f"{arg('visualize', request.visualize)}: feature visualisation optimises photos; this model takes {kind_name}s"
        )
    if request.label_with is None:
        return None
    from hookviz.concepts.naming import clip_concepts, read_vocabulary

    words = read_vocabulary(request.vocabulary)
    return clip_concepts(request.label_with, words, weights=request.label_weights, seed=request.seed)


def add_concepts(plan, document: dict, out: Path) -> dict:
    """``document`` with each channel's ``label`` (when the plan has a labeller) and the
    ``visualization`` of the ``--visualize`` strongest channels per layer."""
    request = plan.request
    say = request.say or (lambda _line: None)
    if plan.concepts is not None:
        from hookviz.concepts.naming import label_atlas

        channels = sum(layer["channels"] for layer in document["layers"])
        say(f"naming {channels} channels with {request.label_with} from {len(plan.concepts.vocabulary)} concepts")
        document = label_atlas(document, out, plan.concepts)
    if request.visualize:
        from hookviz.concepts.visualize import visualize_atlas

        processing = plan.model.preprocessing
        settings = request.visualize_settings()
        bound = f"at most {settings.steps} steps" + (f" or {settings.seconds:g} s" if settings.seconds else "")
        say(f"visualising the {request.visualize} channel(s) of each layer with the best top example ({bound} each)")
        document = visualize_atlas(
            plan.model.module, document, out, request.visualize, size=(processing.size, processing.size),
            mean=processing.mean, std=processing.std, settings=settings, progress=say,
        )  # fmt: skip
    return document
