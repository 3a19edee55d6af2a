"""Options: what a caller asks of hookviz, in a few groups that each check themselves.

The ``hookviz`` command and the Python API build the same groups, so both refuse the same
bad values with the same words (spelled as the caller wrote them, see ``errors.arg``).
A group is a frozen dataclass: once built, its values are valid and inner code trusts
them.

* ``ModelOptions``: which model, which weights, which device.
* ``InputOptions``: how photos become the model's input (overrides of its preprocessing).
* ``LayerOptions``: which layers to record.
* ``TargetOptions``: what to explain (target, objective, CAM method, top-K).
* ``PictureOptions``: which pictures to draw, and how.
* ``RunOptions``: where a run writes, in what batches, which slice of the images.
* ``CheckOptions``: the ``--fail-on`` checks of a CI smoke run, and the baseline it is compared with.
* ``Tolerances``: how far a compared figure may move before it counts as drift.
* ``TrustOptions``: how far to trust a map: faithfulness measures and the randomisation check.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from hookviz.errors import UsageError, arg

__all__ = [
    "ModelOptions",
    "InputOptions",
    "LayerOptions",
    "TargetOptions",
    "PictureOptions",
    "RunOptions",
    "CheckOptions",
    "Tolerances",
    "TrustOptions",
    "ChannelSelection",
    "OBJECTIVES",
    "BOX_OBJECTIVES",
    "IG_BASELINES",
    "MAX_STEPS",
    "parse_triple",
    "parse_shard",
    "read_prompts",
    "MAX_SIDE",
    "MAX_TOPK",
    "MAX_TILES",
    "DEFAULT_MAX_PIXELS",
    "LAYOUT_CHOICES",
    "task_choices",
]

#: Longest side hookviz resizes or crops a photo to. Models take 224 to ~1333 pixels; 4096 is
#: generous, and one 4096x4096 image with its recorded layers already needs gigabytes.
MAX_SIDE = 4096
#: At most this many classes get a CAM of their own (``--topk``): each is a panel of one picture.
MAX_TOPK = 20
#: At most this many tiles in a channel grid: 512 one-inch tiles are already a 23-inch square.
MAX_TILES = 512
#: Above this many pixels a photo is refused as a likely decompression bomb (``--max-pixels``).
DEFAULT_MAX_PIXELS = 100_000_000

OBJECTIVES = ("logit", "ce")
#: What integrated gradients integrate from (``--ig-baseline``): zeros in the model's input
#: space (captum's default), the photo blurred, or the photo's mean colour.
IG_BASELINES = ("zero", "blur", "mean")
#: At most this many steps of integrated gradients (``--steps``): each is a forward and
#: backward pass of every image.
MAX_STEPS = 1024
#: What explains a detection (``--box-objective``): its matched box's score alone, or that
#: score plus the box's IoU with the detection, as pytorch-grad-cam's FasterRCNNBoxScoreTarget.
BOX_OBJECTIVES = ("score", "score+iou")


def task_choices() -> tuple[str, ...]:
    """What ``task`` may be: ``auto``, or a task of ``hookviz.tasks``."""
    from hookviz.tasks import task_names

    return ("auto", *task_names())


#: How a 4-D map that reads both ways, and whose order nothing settles, is read (``--layout``).
LAYOUT_CHOICES = ("auto", "nchw", "nhwc")


def _set(instance, name: str, value) -> None:
    object.__setattr__(instance, name, value)  # normalising a frozen dataclass's field in __post_init__


# ----------------------------------------------------------------------------- model


_DEVICE = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")


@dataclass(frozen=True)
class ModelOptions:
    """Which model to load, with which weights, on which device.

    Attributes:
        name: a torchvision model name, a built-in one, ``timm:NAME``, ``hf:ORG/NAME``, or
            ``package.module:callable``.
        weights: ``DEFAULT``, ``none`` (random init seeded by ``seed``), a torchvision weights
            name, or a state_dict file.
        seed: seeds random initialisation, without touching the caller's random stream.
        device: ``auto``, ``cpu``, ``cuda``, ``cuda:N`` or ``mps``.
        task: a task of ``hookviz.tasks`` (``classify``, ``segment``, ``detect``), or ``auto``:
            the source's word for it, or for a factory's model, what its output looks like.
        trust_checkpoint: load a checkpoint that runs code when loaded (a pickled YOLO
            ``.pt``); refused otherwise.
        prompts: text prompts, for a model with a text tower (``open_clip:ARCH``): its
            classes (see ``read_prompts`` for a file of them).
    """

    name: str
    weights: str = "DEFAULT"
    seed: int = 0
    device: str = "auto"
    task: str = "auto"
    trust_checkpoint: bool = False
    prompts: tuple[str, ...] = ()

    def __post_init__(self):
        prompts = (self.prompts,) if isinstance(self.prompts, str) else tuple(self.prompts or ())
        for text in prompts:
            if not isinstance(text, str) or not text.strip():
                raise UsageError(f"{arg('prompts', text)}: a prompt is a non-empty text (a photo of a cat)")
        _set(self, "prompts", tuple(text.strip() for text in prompts))
        if not self.name or not self.name.strip():
            raise UsageError(f"{arg('model', self.name)}: give a model name; {_list_models_hint()}")
        if not self.weights or not str(self.weights).strip():
            raise UsageError(f"{arg('weights', self.weights)}: give DEFAULT, none or a file")
        if not _DEVICE.match(self.device):
            raise UsageError(f"{arg('device', self.device)}: choose auto, cpu, cuda, cuda:N or mps")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < 2**63:
            raise UsageError(f"{arg('seed', self.seed)}: a seed is a whole number from 0 to 2**63 - 1")
        if self.task not in task_choices():
            raise UsageError(f"{arg('task', self.task)}: choose {', '.join(task_choices())}")


def read_prompts(path: str | Path) -> tuple[str, ...]:
    """The prompts in a text file, one a line (blank lines skipped).

    Raises:
        UsageError: the file cannot be read, or holds no prompt.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{arg('prompts_file', path)}: no such file; give a text file with one prompt a line") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or "not UTF-8 text"
        raise UsageError(
            f"{arg('prompts_file', path)}: cannot read it ({reason}); give a text file with one prompt a line"
        ) from None
    prompts = tuple(line.strip() for line in text.splitlines() if line.strip())
    if not prompts:
        raise UsageError(f"{arg('prompts_file', path)}: the file holds no prompt; write one prompt a line")
    return prompts


def _list_models_hint() -> str:
    from hookviz.errors import hint

    return hint("list_models")


# ----------------------------------------------------------------------------- input


def parse_triple(text: str, name: str) -> tuple[float, float, float]:
    """``"0.5,0.5,0.5"`` -> (0.5, 0.5, 0.5); one number means all three.

    Raises:
        UsageError: not one or three numbers.
    """
    try:
        values = tuple(float(v) for v in str(text).replace(" ", "").split(","))
    except ValueError:
        raise UsageError(f"{arg(name, text)}: expected three numbers such as 0.485,0.456,0.406") from None
    if len(values) == 1:
        values = values * 3
    if len(values) != 3:
        raise UsageError(f"{arg(name, text)}: expected three comma-separated numbers, got {len(values)}")
    return values  # type: ignore[return-value]


def _triple(value, name: str) -> tuple[float, float, float] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return parse_triple(value, name)
    values = tuple(float(v) for v in value)
    if len(values) == 1:
        values = values * 3
    if len(values) != 3:
        raise UsageError(f"{arg(name, value)}: expected three numbers (r, g, b)")
    return values  # type: ignore[return-value]


def _side(value, name: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_SIDE:
        raise UsageError(f"{arg(name, value)}: must be a whole number of pixels from 1 to {MAX_SIDE}")
    return value


@dataclass(frozen=True)
class InputOptions:
    """How photos become the model's input. ``None`` keeps what the model's weights expect.

    Attributes:
        resize: the shorter side before the centre crop.
        crop: the side of the square the model sees; given alone, ``resize`` keeps the model's
            own ratio to it (``--crop 112`` with a 256/224 transform resizes to 128).
        mean, std: per-channel normalisation (r, g, b); one number means all three.
        whole_image: resize the whole photo to ``crop`` x ``crop`` instead of cropping.
        max_pixels: refuse photos with more pixels than this (decompression bombs).
    """

    resize: int | None = None
    crop: int | None = None
    mean: tuple[float, float, float] | None = None
    std: tuple[float, float, float] | None = None
    whole_image: bool = False
    max_pixels: int = DEFAULT_MAX_PIXELS

    def __post_init__(self):
        _set(self, "resize", _side(self.resize, "resize"))
        _set(self, "crop", _side(self.crop, "crop"))
        for name in ("mean", "std"):
            values = _triple(getattr(self, name), name)
            if values is not None and not all(math.isfinite(v) for v in values):
                raise UsageError(f"{arg(name, ','.join(map(str, values)))}: every value must be a finite number")
            _set(self, name, values)
        if self.std is not None and any(v <= 0 for v in self.std):
            raise UsageError(f"{arg('std', ','.join(map(str, self.std)))}: standard deviations must be positive")
        if self.whole_image and self.resize is not None:
            raise UsageError(
                f"{arg('resize')} has no effect with {arg('whole_image')}, which resizes the whole photo "
                f"to the {arg('crop')} size; drop one"
            )
        if not isinstance(self.max_pixels, int) or self.max_pixels < 1:
            raise UsageError(f"{arg('max_pixels', self.max_pixels)}: must be 1 or more")

    def apply(self, preprocessing):
        """``preprocessing`` (a model's own ``images.Preprocessing``) with these overrides."""
        from dataclasses import replace

        changes: dict = {}
        if self.resize is not None:
            changes["resize"] = self.resize
        if self.crop is not None:
            changes["size"] = self.crop
            if self.resize is None and preprocessing.crop and preprocessing.size:
                # The crop alone keeps the model's own ratio of crop to resize (224 of 256; a timm
                # model's crop_pct), so the same share of the photo is seen, at the new size.
                changes["resize"] = max(self.crop, round(self.crop * preprocessing.resize / preprocessing.size))
        if self.mean is not None:
            changes["mean"] = self.mean
        if self.std is not None:
            changes["std"] = self.std
        if self.whole_image:
            changes["mode"] = "whole"
        result = replace(preprocessing, **changes)
        if result.crop and result.size > result.resize:
            raise UsageError(f"{arg('crop', result.size)} is larger than {arg('resize', result.resize)}; the crop must fit")
        return result


# ----------------------------------------------------------------------------- layers


@dataclass(frozen=True)
class LayerOptions:
    """Which layers to record: dotted paths and globs, and module classes.

    With neither, hookviz picks the usual CAM layer and says which and why.

    Attributes:
        layout: how to read a 4-D map whose shape fits channels-first and channels-last
            alike (1x96x96x96) when neither the model nor the ops that made it say which:
            ``nchw`` or ``nhwc``; ``auto`` leaves it undrawn, with a note.
    """

    layers: tuple[str, ...] = ()
    layer_types: tuple[str, ...] = ()
    layout: str = "auto"

    def __post_init__(self):
        for name in ("layers", "layer_types"):
            value = getattr(self, name)
            if value is None:
                value = ()
            values = (value,) if isinstance(value, str) or not isinstance(value, Iterable) else tuple(value)
            for item in values:
                if not isinstance(item, str) or not item.strip():
                    raise UsageError(f"{arg(name, item)}: give a layer path such as layer3.-1")
            _set(self, name, tuple(v.strip() for v in values))
        if self.layout not in LAYOUT_CHOICES:
            raise UsageError(f"{arg('layout', self.layout)}: choose {', '.join(LAYOUT_CHOICES)}")

    @property
    def given(self) -> bool:
        return bool(self.layers or self.layer_types)


# ----------------------------------------------------------------------------- target


@dataclass(frozen=True)
class TargetOptions:
    """What to explain.

    Attributes:
        target: ``top1`` (each image's top class), a class index, or a class name.
        objective: ``logit`` (back-propagate the target's logit) or ``ce`` (cross-entropy).
        cam: the names of registered methods (``hookviz.methods``), separated by commas
            (``gradcam,eigencam``), or ``none``; a CAM always explains the target's score (a
            logit), whatever the objective. The first method that makes maps at the layer's
            resolution is the main one: ``LayerResult.cam``, the ``--topk`` maps.
        topk: how many top classes get a CAM of their own (1: the target only), by the main method.
        output_key: which part of a model's output holds the logits, when it returns several
            (a dict key, or an index into a tuple).
        steps: integrated gradients' steps (Gauss-Legendre nodes, as captum's default rule).
        ig_baseline: what integrated gradients integrate from: ``zero`` (zeros in the model's
            input space, as captum's default), ``blur`` (the input blurred) or ``mean`` (its
            mean per channel).

    A task's own options are a group of its own (``hookviz.tasks.DetectOptions``: which
    detections are explained, and what explains each).
    """

    target: str = "top1"
    objective: str = "logit"
    cam: str = "gradcam"  # a list of names is taken too, and kept as one string
    topk: int = 1
    output_key: str | None = None
    steps: int = 32
    ig_baseline: str = "zero"

    def __post_init__(self):
        from hookviz.methods import get_method

        target = str(self.target).strip()
        if re.fullmatch(r"-\d+", target):
            raise UsageError(f"{arg('target', target)}: a class index must be 0 or more")
        if not target:
            raise UsageError(f"{arg('target', self.target)}: give top1, a class index or a class name")
        _set(self, "target", target)
        if self.objective not in OBJECTIVES:
            raise UsageError(f"{arg('objective', self.objective)}: choose {' or '.join(OBJECTIVES)}")
        _set(self, "cam", ",".join(_method_names(self.cam)))
        methods = [get_method(name) for name in self.methods]
        if not isinstance(self.topk, int) or not 1 <= self.topk <= MAX_TOPK:
            raise UsageError(f"{arg('topk', self.topk)}: must be from 1 to {MAX_TOPK} (one panel per class)")
        if self.topk > 1:
            _check_topk(self.topk, self.cam, [m for m in methods if m.resolution == "layer"])
        if isinstance(self.steps, bool) or not isinstance(self.steps, int) or not 1 <= self.steps <= MAX_STEPS:
            raise UsageError(
                f"{arg('steps', self.steps)}: integrated gradients takes 1 to {MAX_STEPS} steps (each a forward and "
                "backward pass of every image; 32 by default)"
            )
        if self.ig_baseline not in IG_BASELINES:
            raise UsageError(f"{arg('ig_baseline', self.ig_baseline)}: choose {', '.join(IG_BASELINES)}")
        if self.output_key is not None:
            key = str(self.output_key).strip()
            if not key:
                raise UsageError(f"{arg('output_key', self.output_key)}: give a key or an index")
            _set(self, "output_key", key)

    @property
    def methods(self) -> tuple[str, ...]:
        """The CAM methods' names, in the order given; ``()`` for ``none``."""
        return () if self.cam == "none" else tuple(self.cam.split(","))


def _method_names(cam) -> list[str]:
    """``cam`` split at its commas, each name stripped, checked to be one list of methods."""
    text = ",".join(map(str, cam)) if isinstance(cam, (list, tuple)) else str(cam)
    names = [name.strip() for name in text.split(",")]
    if not all(names):
        raise UsageError(f"{arg('cam', cam)}: an empty method name; give names separated by commas (gradcam,eigencam)")
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise UsageError(f"{arg('cam', cam)}: {', '.join(twice)} named twice; give each method once")
    if "none" in names and len(names) > 1:
        raise UsageError(f"{arg('cam', cam)}: none means no CAM at all; drop it or the other names")
    return names


def _check_topk(topk: int, cam: str, layer_methods) -> None:
    """``--topk`` draws the main (first layer-resolution) method's map of each top class."""
    if not layer_methods:
        raise UsageError(f"{arg('topk', topk)} needs a method that maps a layer; {arg('cam', cam)} has none")
    main = layer_methods[0]
    if not main.class_specific:
        raise UsageError(
            f"{arg('topk', topk)} with {arg('cam', cam)}: {main.name} makes the same map for every class (it uses "
            f"no target), so its top-{topk} maps would be one map {topk} times; drop {arg('topk')} or put a "
            "class-specific method first"
        )


# ----------------------------------------------------------------------------- trust


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


# ----------------------------------------------------------------------------- pictures


@dataclass(frozen=True)
class ChannelSelection:
    """The channels a grid shows: the ``count`` most active, or every index in ``ranges``
    (inclusive pairs). Kept as ranges, so ``0-30000000`` costs nothing until a layer's
    real channel count bounds it."""

    count: int | None = 64
    ranges: tuple[tuple[int, int], ...] = ()

    @classmethod
    def parse(cls, value) -> "ChannelSelection":
        """``64`` (the most active 64), ``0-15`` or ``3,7,9`` (those channels), or a list of ints.

        Raises:
            UsageError: another form, a count of 0, or a range that runs backwards.
        """
        if isinstance(value, ChannelSelection):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            text = str(value)
        elif isinstance(value, str):
            text = value.strip()
        else:
            return cls(count=None, ranges=tuple((int(v), int(v)) for v in value))
        if text.isdigit():
            if int(text) < 1:
                raise UsageError(f"{arg('channels', text)}: a count must be 1 or more; for channel 0 alone write 0-0")
            return cls(count=int(text))
        ranges = []
        try:
            for part in filter(None, (p.strip() for p in text.split(","))):
                start, _, end = part.partition("-")
                low, high = int(start), int(end) if end else int(start)
                if low < 0 or high < low:
                    raise ValueError
                ranges.append((low, high))
        except ValueError:
            ranges = []
        if not ranges:
            raise UsageError(f"{arg('channels', text)}: expected a count (64), a range (0-15) or a list (3,7,9)")
        return cls(count=None, ranges=tuple(ranges))

    def __str__(self) -> str:
        if self.count is not None:
            return str(self.count)
        return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in self.ranges)

    def indices(self, available: int) -> list[int]:
        """The listed channels that exist among ``available``, in order, without repeats."""
        chosen: dict[int, None] = {}
        for low, high in self.ranges:
            chosen.update(dict.fromkeys(range(low, min(high, available - 1) + 1)))
        return list(chosen)


def _default_pictures() -> tuple[str, ...]:
    from hookviz.render.kinds import default_groups

    return default_groups()


@dataclass(frozen=True)
class PictureOptions:
    """Which pictures to draw per image and layer, and how.

    Attributes:
        pictures: groups of picture kinds (``hookviz.render.kinds``): some of ``summary``,
            ``channels``, ``cam`` (the default) or a registered kind's (``()`` or ``"none"``: none).
        channels: the channels of the grid (``ChannelSelection.parse`` forms).
        scale: ``tile`` (each tile its own colour scale) or ``shared`` (one for all).
        grad_channels: also draw the grid of ``grad_output``.
        kinds: the picture kinds these options ask for, in drawing order (set from the others;
            they travel with the options to the render workers).
    """

    pictures: tuple[str, ...] = field(default_factory=_default_pictures)
    channels: ChannelSelection = field(default_factory=ChannelSelection)
    scale: str = "tile"
    grad_channels: bool = False
    kinds: tuple = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self):
        from hookviz.render.kinds import kinds_for, picture_groups

        pictures = self.pictures
        if isinstance(pictures, str):
            pictures = tuple(p.strip() for p in pictures.split(",") if p.strip())
        pictures = tuple(dict.fromkeys(pictures or ()))
        if pictures == ("none",):
            pictures = ()
        for picture in pictures:
            if picture not in picture_groups():
                raise UsageError(f"{arg('pictures', picture)}: choose from {', '.join(picture_groups())}, or none")
        _set(self, "pictures", pictures)
        _set(self, "channels", ChannelSelection.parse(self.channels))
        if self.scale not in ("tile", "shared"):
            raise UsageError(f"{arg('scale', self.scale)}: choose tile or shared")
        _set(self, "kinds", kinds_for(self))


# ----------------------------------------------------------------------------- run


def parse_shard(text: str) -> tuple[int, int] | None:
    """``"2/8"`` -> (2, 8); ``"auto"`` -> what torchrun's or a Slurm array's variables say
    (``hookviz.runs.cluster``), ``None`` without them. Raises UsageError for other forms or K
    outside 1..N."""
    if str(text).strip().lower() == "auto":
        from hookviz.runs.cluster import launcher_shard

        return launcher_shard()
    try:
        k, n = (int(v) for v in str(text).split("/"))
    except ValueError:
        raise UsageError(f"{arg('shard', text)}: expected K/N, such as 1/4, or auto (torchrun's or a Slurm array's)") from None
    if n < 1 or not 1 <= k <= n:
        raise UsageError(f"{arg('shard', text)}: K must be between 1 and N")
    return k, n


@dataclass(frozen=True)
class RunOptions:
    """Where and how a run over many images works.

    Attributes:
        out: the output folder (one sub-folder per image).
        save_tensors: also write each image's ``tensors.npz``.
        batch_size: most images per forward pass.
        skip_existing: skip images whose folder already holds this run's results.
        shard: ``(K, N)``: the K-th of N slices of the image list; ``"K/N"``; ``"auto"``:
            from torchrun's ``RANK``/``WORLD_SIZE`` or a Slurm array's variables (``hookviz.runs.cluster``).
        workers: rendering processes (0: one per CPU).
        memory_budget: bytes of recorded tensors a batch may hold.
        tensorboard: also log to this TensorBoard folder.
        command: the command line, for run.json.
    """

    out: Path = Path("hookviz-out")
    save_tensors: bool = False
    batch_size: int = 8
    skip_existing: bool = False
    shard: tuple[int, int] | None = None
    workers: int = 0
    memory_budget: int = 256 * 2**20
    tensorboard: Path | None = None
    command: tuple[str, ...] = ()

    def __post_init__(self):
        if isinstance(self.out, str) and not self.out.strip():
            raise UsageError(f"{arg('out', repr(self.out))}: give a folder name, such as hookviz-out")
        _set(self, "out", Path(self.out))
        if isinstance(self.shard, str):
            _set(self, "shard", parse_shard(self.shard))
        elif self.shard is not None:
            parse_shard("/".join(map(str, self.shard)))
            _set(self, "shard", tuple(self.shard))
        if not isinstance(self.batch_size, int) or not 1 <= self.batch_size <= 1024:
            raise UsageError(f"{arg('batch_size', self.batch_size)}: must be from 1 to 1024")
        if not isinstance(self.workers, int) or self.workers < 0:
            raise UsageError(f"{arg('workers', self.workers)}: must be 0 (one per CPU) or more")
        if self.tensorboard is not None:
            if isinstance(self.tensorboard, str) and not self.tensorboard.strip():
                raise UsageError(f"{arg('tensorboard', repr(self.tensorboard))}: give a folder name")
            logdir = Path(self.tensorboard)
            if logdir.exists() and not logdir.is_dir():
                raise UsageError(f"{arg('tensorboard', logdir)}: is a file, not a folder; choose a folder for the logs")
            _set(self, "tensorboard", logdir)


@dataclass(frozen=True)
class Tolerances:
    """How far a run may move from its baseline before ``drift`` reports it.

    A forward tensor (the model's input, a layer's input or output, the logits) drifts
    where ``max |after - before| > atol + rtol * max |before|``, over the full tensors when
    both runs saved them, and over the fingerprints' maps and channel means and the
    statistics otherwise. A CAM drifts where its correlation with the baseline's falls
    below ``min_cam_corr``.

    Measured (``bench/drift.py``, README "Regression checks"): another thread count, batch
    size or CPU (AVX2 instead of AVX-512) moved forward tensors by at most 3.2e-6 of their
    largest value (6.4e-6 in the fingerprints) and CAMs to a correlation of 0.999998;
    scaling one convolution's weights by 1 + 1e-3 moved every forward tensor after it by at
    least 4e-4 (2.2e-4 in the fingerprints) and none before it. ``rtol`` sits 8x above that
    noise and 4x below that change. CAMs come from gradients, which the same change reaches
    at every layer before it too: it took some early, sparse CAMs to a correlation of
    0.984. ``min_cam_corr`` stays well below that, so it flags a CAM that looks different,
    not a small change; the forward tensors say where a change happened.
    """

    rtol: float = 5e-5
    atol: float = 1e-7
    min_cam_corr: float = 0.9

    def __post_init__(self):
        for name in ("rtol", "atol"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < math.inf:
                raise UsageError(f"{arg(name, value)}: must be a number, 0 or more")
            _set(self, name, float(value))
        value = self.min_cam_corr
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not -1.0 <= value <= 1.0:
            raise UsageError(f"{arg('min_cam_corr', value)}: a correlation, from -1 to 1")
        _set(self, "min_cam_corr", float(value))

    def to_json(self) -> dict:
        return {"rtol": self.rtol, "atol": self.atol, "min_cam_corr": self.min_cam_corr}


@dataclass(frozen=True)
class CheckOptions:
    """The checks that make a run exit 3 (``--fail-on``), their threshold, and the baseline.

    Attributes:
        fail_on: names from ``hookviz.explaining.checks.CHECKS`` (``nonfinite``, ``dead``, ``zero-grad``),
            or ``drift`` (differs from ``baseline`` beyond ``tolerances``).
        dead_fraction: ``dead`` means at least this fraction of an output is zero.
        baseline: an earlier run's output folder: the run ends by comparing itself with it
            (``OUT/diff.json``), whether or not ``drift`` is a check.
        tolerances: what counts as drift.
    """

    fail_on: tuple[str, ...] = ()
    dead_fraction: float = 1.0
    baseline: Path | None = None
    tolerances: Tolerances = field(default_factory=Tolerances)

    def __post_init__(self):
        from hookviz.explaining.checks import BASELINE_CHECKS, CHECKS, parse_checks

        given = self.fail_on
        _set(self, "fail_on", parse_checks(self.fail_on))
        if given and not self.fail_on:
            raise UsageError(f"{arg('fail_on', given)}: name a check: {', '.join([*CHECKS.names(), *BASELINE_CHECKS])}")
        fraction = self.dead_fraction
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0.0 < fraction <= 1.0:
            raise UsageError(f"{arg('dead_fraction', fraction)}: must be above 0 and at most 1 (1: all zeros)")
        if self.baseline is not None:
            if not str(self.baseline).strip():
                raise UsageError(f"{arg('baseline', repr(str(self.baseline)))}: give the output folder of an earlier run")
            _set(self, "baseline", Path(self.baseline))
        elif "drift" in self.fail_on:
            raise UsageError(f"{arg('fail_on', 'drift')} compares the run with a baseline: add {arg('baseline', 'BASE')}")
        if not isinstance(self.tolerances, Tolerances):
            raise UsageError(f"{arg('tolerances', self.tolerances)}: give a Tolerances(rtol=..., atol=..., min_cam_corr=...)")
