"""What a run was asked: its images and option groups, and what follows from them alone
(the shard's images, the run file's name, each image's TensorBoard step); and its samples
found again by the model's sample kind, once the model says what one is."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

from hookviz.options import (
    CheckOptions,
    InputOptions,
    LayerOptions,
    ModelOptions,
    PictureOptions,
    RunOptions,
    TargetOptions,
    TrustOptions,
)
from hookviz.runs.cluster import run_file_name, shard_of

__all__ = ["RunRequest"]


@dataclass(frozen=True, eq=False)
class RunRequest:
    """A run's arguments (see ``runner.run``), as the caller gave them."""

    images: tuple[Path, ...]
    model: ModelOptions
    layers: LayerOptions = LayerOptions()
    inputs: InputOptions = InputOptions()
    target: TargetOptions = TargetOptions()
    pictures: PictureOptions = PictureOptions()
    options: RunOptions = RunOptions()
    checks: CheckOptions = CheckOptions()
    task_options: tuple = ()
    trust: TrustOptions = TrustOptions()
    on_start: Callable[[str], None] | None = None
    sample_options: tuple = ()
    sources: tuple[str, ...] | None = None

    def found_by(self, kind, notes: list[str], settings=None) -> "RunRequest":
        """This request with its samples as the model's sample ``kind`` finds them in ``sources``
        (``SampleKind.find``, then ``samples.sample_keys`` as the kind's ``settings`` ask: a video's
        ``--clips``): the same request when no sources were given (the caller named the samples),
        or when the kind is a photo and its photos were found already.

        Raises:
            UsageError: a source names no sample of that kind.
        """
        from hookviz.samples import sample_keys

        if self.sources is None or (kind.name == "photo" and self.images):
            return self
        found = kind.find(list(self.sources), exclude=[self.out], notes=notes)
        return replace(self, images=tuple(sample_keys(kind, found, settings)))

    @cached_property
    def selected(self) -> list[Path]:
        """The images this process explains: all of them, or its shard's."""
        return shard_of(self.images, self.options.shard)

    @cached_property
    def step_of(self) -> dict[Path, int]:
        """Each selected image's step in TensorBoard (and its render job's number)."""
        return {path: step for step, path in enumerate(self.selected)}

    @property
    def out(self) -> Path:
        return self.options.out

    @property
    def run_json(self) -> Path:
        return self.options.out / run_file_name(self.options.shard)
