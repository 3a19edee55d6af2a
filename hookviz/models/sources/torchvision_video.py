"""torchvision's video classifiers (``torchvision.models.video``: r3d_18, mc3_18, r2plus1d_18,
s3d, mvit_v1_b, mvit_v2_s, swin3d_t, swin3d_s, swin3d_b), by name, as clip models.

Each weights entry brings its ``VideoClassification`` transform (resize, centre crop,
Kinetics mean and std) and its Kinetics-400 categories. The transform object is kept on the
``Preprocessing`` (``transform``), its fields read into hookviz's own (the video sample kind
resizes each frame's shorter side and crops it, as the object does for 4:3 frames: r3d's
resizes to 128x171 exactly), and the number of frames its weights were measured with (the
``clip_len`` its documentation gives) is ``Preprocessing.frames``. The model's samples are
clips: ``LoadedModel.sample_kind`` is ``video``.

``--weights DEFAULT`` reads the torch hub cache as torchvision's photo models do; with random
weights (``none``) the same input sizes, mean and std are used: those of the architecture.
"""

from __future__ import annotations

import re
from dataclasses import replace

from hookviz.inputs.images import Preprocessing
from hookviz.lazy_dynamo import import_torchvision
from hookviz.models.sources.base import LoadedModel, random_or_file, register_source, seeded, weights_kind
from hookviz.tasks import DEFAULT_TASK

__all__ = ["TorchvisionVideoSource", "video_names", "video_preprocessing", "clip_frames", "VIDEO_KIND"]

#: The sample kind of a clip model (the ``video`` kind of ``hookviz.samples``).
VIDEO_KIND = "video"

#: Frames per clip where the weights' documentation names none.
DEFAULT_FRAMES = 16


def _video():
    return import_torchvision().models.video


def video_names() -> list[str]:
    """torchvision's video classifiers, by name."""
    import torchvision.models

    return sorted(torchvision.models.list_models(module=_video()))


def clip_frames(entry) -> int:
    """The frames per clip the weights ``entry`` were measured with: the ``clip_len`` of its
    documentation (16 for r3d_18 and MViT, 32 for Swin3D, 128 for S3D), else its
    ``min_temporal_size``, else 16."""
    found = re.search(r"clip_len=(\d+)", str(entry.meta.get("_docs", "")))
    if found:
        return int(found.group(1))
    return int(entry.meta.get("min_temporal_size") or DEFAULT_FRAMES)


def video_preprocessing(entry, pretrained: bool) -> Preprocessing:
    """The ``Preprocessing`` of a clip for the weights ``entry``: its transform's shorter side,
    crop, mean and std, its frames, and (for pretrained weights) the transform object itself."""
    from hookviz.inputs.transforms import WeightsTransform

    transform = entry.transforms()
    processing = Preprocessing(
        resize=int(min(transform.resize_size)),
        size=int(transform.crop_size[0]),
        mean=_three(transform.mean),
        std=_three(transform.std),
        interpolation=getattr(transform.interpolation, "value", "bilinear"),
        frames=clip_frames(entry),
    )
    if not pretrained:
        return processing
    return replace(processing, transform=WeightsTransform(transform, f"{entry}'s transforms() ({type(transform).__name__})"))


def _three(values) -> tuple[float, float, float]:
    first, second, third = (float(v) for v in values)
    return first, second, third


def _required_input_size(model) -> tuple[int, int] | None:
    """The (height, width) MViT takes: its positional encoding's ``spatial_size`` is the token
    grid after ``conv_proj``'s patch step (56x56 tokens of 4x4 pixels: 224x224), and its
    forward reads that grid, not the input's."""
    encoding, conv = getattr(model, "pos_encoding", None), getattr(model, "conv_proj", None)
    size, stride = getattr(encoding, "spatial_size", None), getattr(conv, "stride", None)
    if not (isinstance(size, (tuple, list)) and len(size) == 2 and isinstance(stride, (tuple, list)) and len(stride) == 3):
        return None
    return int(size[0]) * int(stride[1]), int(size[1]) * int(stride[2])


def _required_frames(model) -> int | None:
    """The frames per clip MViT takes: its encoding's ``temporal_size`` times ``conv_proj``'s time step."""
    encoding, conv = getattr(model, "pos_encoding", None), getattr(model, "conv_proj", None)
    size, stride = getattr(encoding, "temporal_size", None), getattr(conv, "stride", None)
    return int(size) * int(stride[0]) if isinstance(size, int) and isinstance(stride, (tuple, list)) else None


@register_source
class TorchvisionVideoSource:
    name = "torchvision-video"
    priority = 91
    prefix = None

    def about(self) -> str:
        return "--model NAME: a clip classifier (Kinetics-400); DEFAULT weights from the torch hub cache"

    def claims(self, name: str) -> bool:
        return name in video_names()

    def names(self) -> list[str]:
        return video_names()

    def describe(self, name: str) -> str:
        entry = import_torchvision().models.get_model_weights(name).DEFAULT
        processing = video_preprocessing(entry, False)
        return f"video: {processing.frames} frames of {processing.size}x{processing.size}"

    def task_of(self, name: str) -> str:
        return DEFAULT_TASK

    def load(self, name: str, weights: str, seed: int, trust_checkpoint: bool = False) -> LoadedModel:
        from hookviz.models.sources.torchvision_models import _pretrained, refuse_unknown_weights, weights_member

        models = import_torchvision().models
        enum = models.get_model_weights(name)
        kind = weights_kind(weights)
        member = weights if kind == "default" else weights_member(enum, weights)
        if member is not None:
            entry = enum.DEFAULT if kind == "default" else enum[member]
            with seeded(seed):
                model = _pretrained(name, weights, entry)
            return self._loaded(name, model, f"{member} ({entry})", entry, video_preprocessing(entry, True))
        refuse_unknown_weights(enum, weights, kind)
        with seeded(seed):
            model = models.get_model(name, weights=None)
        loaded = random_or_file(model, weights, seed)
        processing = video_preprocessing(enum.DEFAULT, False)
        return self._loaded(name, model, loaded.label, enum.DEFAULT, processing, notes=loaded.notes, weights_sha256=loaded.sha256)

    def _loaded(self, name, model, label, entry, processing, **weights) -> LoadedModel:
        categories = tuple(entry.meta.get("categories") or ()) or None
        return LoadedModel(
            name,
            model.eval(),
            label,
            categories,
            processing,
            source=self.name,
            task=DEFAULT_TASK,
            input_size=_required_input_size(model),
            input_frames=_required_frames(model),
            sample_kind=VIDEO_KIND,
            **weights,
        )
