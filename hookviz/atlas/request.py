"""What an atlas is asked for: one frozen, checked value, made where the arguments enter."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hookviz.errors import UsageError, arg

__all__ = ["AtlasRequest", "MAX_TOP", "RELEVANCE", "RENDERING", "parse_shard"]

#: The most examples a channel may keep.
MAX_TOP = 100

#: The options only the atlas's later steps read (naming, visualising), by group: the first of a
#: group says whether the group is on (``--label-with``, ``--visualize``). A shard records them and
#: ``hookviz atlas --merge`` takes them from the shards (``AtlasRequest.rendering``).
RENDERING = (("label_with", "vocabulary", "label_weights"), ("visualize", "visualize_steps", "visualize_seconds"))

#: The ranking ``--relevance`` adds (``hookviz.atlas.ranking.RANKINGS``), kept as ``relevance_top``.
RELEVANCE = "relevance"


@dataclass(frozen=True)
class AtlasRequest:
    """Args:
    model, weights, seed: the model, as ``hookviz run`` loads it.
    layers: the layers (``--layer``), at least one.
    sources: the files, folders and patterns of the samples (``--from-list``'s included).
    out: the atlas's folder.
    top: examples kept per channel (``--top``).
    rank: the ranking of a channel's examples (``hookviz.atlas.ranking.RANKINGS``).
    shard: ``(K, N)``: this process takes the K-th of N slices of the samples; ``None``: all.
    skip_existing: resume from the state a killed run left in ``out``.
    batch_size, device: how the forward passes run.
    sample_options: sample kinds' option groups, as ``hookviz run`` takes them (a clip's
        ``VideoOptions``: ``--frames``, ``--clips``); a kind's defaults where none is given.
    relevance: ``predicted`` or a class (name or index): each channel's examples are also ranked
        by the channel's contribution to that class's score (``relevance_top``); ``None``: not.
    relevance_rule: how that contribution is computed (``hookviz.concepts.relevance.RELEVANCE_RULES``).
    label_with, vocabulary, label_weights: name each channel from the concepts of the file
        ``vocabulary`` by CLIP-Dissect's SoftWPMI with open_clip model ``label_with``
        (``open_clip:ARCH[/TAG]``), its weights ``label_weights`` (``DEFAULT``: cached; ``none``: random).
    visualize, visualize_steps, visualize_seconds: an input optimised to excite each of the
        ``visualize`` channels per layer whose best example scored highest, in at most that many
        steps and seconds a channel.
    say: told a line as each later step (naming, visualising) goes; ``None``: nothing is said.
    """

    model: str
    layers: tuple[str, ...]
    sources: tuple[str, ...]
    out: Path
    weights: str = "DEFAULT"
    seed: int = 0
    top: int = 9
    rank: str = "max"
    shard: tuple[int, int] | None = None
    skip_existing: bool = False
    batch_size: int = 32
    device: str = "cpu"
    sample_options: tuple = ()
    relevance: str | None = None
    relevance_rule: str = "gradient-x-activation"
    label_with: str | None = None
    vocabulary: Path | None = None
    label_weights: str = "DEFAULT"
    visualize: int = 0
    visualize_steps: int = 256
    visualize_seconds: float | None = None
    say: Callable[[str], None] | None = field(default=None, compare=False, repr=False)
    notes: list[str] = field(default_factory=list, compare=False, repr=False)

    def __post_init__(self):
        from hookviz.atlas.ranking import RANKINGS

        if not self.layers:
            raise UsageError(f"no layer given: pass {arg('layers', 'LAYER')} (hookviz layers --model {self.model} lists them)")
        if not 1 <= self.top <= MAX_TOP:
            raise UsageError(f"{arg('top', self.top)}: give a number from 1 to {MAX_TOP}")
        if not 1 <= self.batch_size <= 4096:
            raise UsageError(f"{arg('batch_size', self.batch_size)}: give a number from 1 to 4096")
        if self.rank == RELEVANCE:
            raise UsageError(
                f"{arg('rank', self.rank)}: give max or mean, and {arg('relevance', 'CLASS')} to rank by relevance too"
            )
        RANKINGS.get(self.rank)
        self._check_concepts()

    def _check_concepts(self) -> None:
        from hookviz.options.pictures import RELEVANCE_RULES

        if self.relevance is not None and not str(self.relevance).strip():
            raise UsageError(f"{arg('relevance', self.relevance)}: give predicted, a class name or a class index")
        if self.relevance_rule not in RELEVANCE_RULES:
            raise UsageError(f"{arg('relevance_rule', self.relevance_rule)}: choose {' or '.join(RELEVANCE_RULES)}")
        if (self.label_with is None) != (self.vocabulary is None):
            given, missing = ("label_with", "vocabulary") if self.vocabulary is None else ("vocabulary", "label_with")
            raise UsageError(
                f"{arg(given)} needs {arg(missing)}: names come from a vocabulary (a text file of one concept a line) and an open_clip model"
            )
        if self.label_with is not None and not self.label_with.startswith("open_clip:"):
            raise UsageError(
                f"{arg('label_with', self.label_with)}: names come from an open_clip model; give open_clip:ARCH (as open_clip:ViT-B-32)"
            )
        if self.visualize < 0:
            raise UsageError(f"{arg('visualize', self.visualize)}: give how many channels per layer to visualise, 0 or more")
        if self.visualize:
            self.visualize_settings()

    def visualize_settings(self):
        """``--visualize``'s ``VisualizeSettings``.

        Raises:
            UsageError: steps below 1, seconds not positive.
        """
        from hookviz.concepts.visualize import VisualizeSettings

        return VisualizeSettings(steps=self.visualize_steps, seconds=self.visualize_seconds, seed=self.seed)

    @property
    def rankings(self) -> tuple[str, ...]:
        """The rankings the run keeps: ``rank``, and ``relevance`` when asked."""
        return (self.rank, RELEVANCE) if self.relevance is not None else (self.rank,)

    def rendering(self) -> dict:
        """The options of ``RENDERING``, as a state records them (files as absolute paths, so that
        a merge run elsewhere finds them)."""
        import os

        found = {name: getattr(self, name) for group in RENDERING for name in group}
        if found["vocabulary"] is not None:
            found["vocabulary"] = os.path.abspath(found["vocabulary"])
        if os.path.isfile(found["label_weights"]):
            found["label_weights"] = os.path.abspath(found["label_weights"])
        return found

    def recipe(self) -> dict:
        """What must match for two runs' states to be parts of one atlas (the shard aside)."""
        recipe = {
            "model": self.model,
            "weights": self.weights,
            "seed": self.seed,
            "layers": list(self.layers),
            "top": self.top,
            "rank": self.rank,
        }
        if self.relevance is not None:
            recipe.update(relevance=str(self.relevance), relevance_rule=self.relevance_rule)
        recipe.update(self._sample_settings())
        return recipe

    def _sample_settings(self) -> dict:
        """The sample kinds' options given otherwise than by default (``--frames``, ``--clips``...),
        by name: they change what a sample is made of, so shards must share them."""
        from dataclasses import fields

        return {
            item.name: getattr(group, item.name)
            for group in self.sample_options
            for item in fields(group)
            if getattr(group, item.name) != item.default
        }


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """``K/N`` -> ``(K, N)``; ``auto`` -> torchrun's or a Slurm array's; ``None`` -> torchrun's, if any.

    Raises:
        UsageError: not of the form K/N with 1 <= K <= N.
    """
    from hookviz.runs.cluster import AUTO, command_shard, launcher_shard

    given = command_shard(text)
    if given is None or isinstance(given, tuple):
        return given
    if given == AUTO:
        return launcher_shard()
    parts = given.split("/")
    if len(parts) == 2 and all(p.strip().isdigit() for p in parts):
        k, n = int(parts[0]), int(parts[1])
        if 1 <= k <= n:
            return None if n == 1 else (k, n)
    raise UsageError(f"{arg('shard', given)}: give K/N with 1 <= K <= N (2/4: the second of four slices), or auto")
