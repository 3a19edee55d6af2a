"""Ultralytics YOLO detectors: ``--model yolo:yolov8n.yaml`` (built from its config, random
weights) or ``--model yolo:PATH.pt`` (a trained checkpoint, only with ``--trust-checkpoint``).

The model is wrapped (``YoloDetector``) so that it answers as torchvision's detectors do: per
photo a dict of ``boxes``, ``labels`` and ``scores``, the boxes the model's own NMS keeps.
Each box's score is not NMS's copy but its class score at its anchor, read from the raw
(pre-NMS) prediction, so its gradient reaches the neck output the anchor lies on. The
detection task (``tasks.detect``) explains them as it explains torchvision's.

A checkpoint is a pickle: loading one runs code the file names, so it is refused unless the
caller trusts it. Ultralytics is an optional extra (``hookviz[yolo]``, AGPL-3.0): it is imported
only here, with its settings file in a folder of its own, offline, its logger silenced, and
everything its import changes in the process (environment variables, print options,
warning filters, OpenCV's threads) put back.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

from hookviz.errors import UnknownModelError, WeightsError, arg, describe, hint
from hookviz.inputs.images import Preprocessing
from hookviz.models.sources.base import (
    LoadedModel,
    load_weights_file,
    register_source,
    reset_parameters,
    seeded,
    weights_kind,
)

__all__ = ["YoloSource", "YoloDetector", "PREFIX", "INSTALL", "NECK_REASON"]

PREFIX = "yolo:"
INSTALL = "pip install 'hookviz[yolo]'"
#: Configs ``hookviz models`` lists (any plain detection config ultralytics ships is accepted).
EXAMPLES = ("yolov8n.yaml", "yolov8s.yaml", "yolo11n.yaml", "yolo11s.yaml")
#: Photos are resized to this on their long side, as ultralytics' predict does (its ``imgsz``).
IMAGE_SIZE = 640
#: NMS's IoU cut and its first score cut (ultralytics' predict defaults); ``--score-threshold`` lowers the latter.
IOU_THRESHOLD, SCORE_THRESHOLD = 0.7, 0.25
NECK_REASON = (
    "the neck outputs the detect head reads (strides {strides}): each box's score is read at one anchor of one of "
    "them, its scale's (report.json notes which per detection)"
)
SCORES_ARE = (
    "each box kept by the model's own NMS is explained by its class score at its anchor before NMS (the raw "
    "prediction NMS chose it from)"
)
_ENVIRONMENT = {"YOLO_OFFLINE": "1", "YOLO_VERBOSE": "False", "YOLO_AUTOINSTALL": "False"}


def _installed() -> bool:
    return importlib.util.find_spec("ultralytics") is not None


@contextlib.contextmanager
def quiet_ultralytics() -> Iterator[None]:
    """Import and use ultralytics offline and silent, and give the process back as it was.

    Its import sets environment variables, torch's and numpy's print options, warning filters
    and OpenCV's thread count, replaces ``PIL.Image.open`` and ``torch.save`` with its own
    (``ultralytics.utils.patches``), and writes a settings file in the user's config folder:
    the settings go to a folder of hookviz's own, the rest is restored when the block ends.
    """
    import numpy as np
    import PIL.Image
    import torch

    patched = [(PIL.Image, "open"), (torch, "save"), (torch, "load")]
    originals = [(owner, name, getattr(owner, name)) for owner, name in patched]

    environment = dict(os.environ)
    numpy_print = np.get_printoptions()
    torch_print = {
        name: getattr(torch._tensor_str.PRINT_OPTS, name)
        for name in ("precision", "threshold", "edgeitems", "linewidth", "sci_mode")
    }
    cv2 = _cv2()
    threads = cv2.getNumThreads() if cv2 is not None else None
    logger = logging.getLogger("ultralytics")
    level, disabled = logger.level, logger.disabled
    config = Path(tempfile.gettempdir()) / f"hookviz-ultralytics-{os.getuid() if hasattr(os, 'getuid') else 0}"
    os.environ.update({**_ENVIRONMENT, "YOLO_CONFIG_DIR": str(config)})
    try:
        with warnings.catch_warnings():
            logger.disabled = True
            yield
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)
        logger.setLevel(level)
        logger.disabled = disabled
        os.environ.clear()
        os.environ.update(environment)
        np.set_printoptions(**numpy_print)
        torch.set_printoptions(**torch_print)
        if cv2 is not None and threads is not None:
            cv2.setNumThreads(threads)


def _cv2():
    try:
        import cv2
    except ImportError:
        return None
    return cv2


def _import(name: str):
    """``ultralytics.nn.tasks`` (call inside ``quiet_ultralytics``)."""
    if not _installed():
        raise UnknownModelError(f"{arg('model', name)} needs ultralytics, an optional extra (AGPL-3.0): {INSTALL}")
    import ultralytics.nn.tasks as tasks

    logging.getLogger("ultralytics").disabled = True  # set up by the import: silent until the block ends
    return tasks


@register_source
class YoloSource:
    name = "ultralytics"
    priority = 10  # prefixed names first
    prefix = PREFIX

    def about(self) -> str:
        if not _installed():
            return f"YOLO detectors (yolo:yolov8n.yaml, yolo:PATH.pt): {INSTALL}"
        return "YOLO detectors: yolo:CONFIG.yaml (random weights) or yolo:PATH.pt with --trust-checkpoint"

    def claims(self, name: str) -> bool:
        return name.startswith(PREFIX)

    def names(self) -> list[str]:
        return [PREFIX + config for config in EXAMPLES] if _installed() else []

    def describe(self, name: str) -> str:
        return "built from its config, random weights"

    def task_of(self, name: str) -> str:
        from hookviz.tasks.detect import Detect

        return Detect.name

    def load(self, name: str, weights: str, seed: int, trust_checkpoint: bool = False) -> LoadedModel:
        spec = name[len(PREFIX) :]
        if not spec:
            raise UnknownModelError(f"{arg('model', name)}: name a config (yolo:yolov8n.yaml) or a checkpoint (yolo:best.pt)")
        if Path(spec).suffix.lower() not in (".pt", ".yaml", ".yml"):  # ultralytics would assert on the suffix
            raise UnknownModelError(
                f"{arg('model', name)}: neither a config (.yaml) nor a checkpoint (.pt); "
                f"try yolo:{EXAMPLES[0]} (random weights) or yolo:PATH.pt (a trained checkpoint)"
            )
        checkpoint = spec.lower().endswith(".pt")
        if checkpoint and not Path(spec).is_file():  # before asking for trust in a file that is not there
            raise WeightsError(f"{arg('model', name)}: no such file {spec!r}; check the path to the .pt file")
        if checkpoint and not trust_checkpoint:
            raise WeightsError(
                f"{arg('model', name)}: a YOLO checkpoint is a pickle that runs code when loaded; pass "
                f"{arg('trust_checkpoint')} if you trust its author"
            )
        if checkpoint and weights_kind(weights) == "other":
            raise WeightsError(f"{arg('weights', weights)}: {spec} carries its own weights; drop {arg('weights')}")
        from hookviz.tasks.detect import Detect

        with quiet_ultralytics():
            tasks = _import(name)
            if checkpoint:
                model, label, sha = _checkpoint(tasks, name, Path(spec)), f"checkpoint {spec}", None
                if weights_kind(weights) == "none":  # its architecture alone (``hookviz layers``' default)
                    with seeded(seed):
                        reset_parameters(model)
                    label = f"none (random init of the architecture in {spec}, seed {seed})"
            else:
                model, label, sha = _configured(tasks, name, spec, weights, seed)
            detector = YoloDetector(model)
        categories = _categories(model)
        strides = ", ".join(str(int(s)) for s in detector.strides)
        return LoadedModel(
            name,
            detector.eval(),
            label,
            categories,
            Preprocessing(mode="original", mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0)),
            source=self.name,
            task=Detect.name,
            weights_sha256=sha,
            default_layers=detector.neck_layers,
            default_layers_reason=NECK_REASON.format(strides=strides),
        )


def _configured(tasks, name: str, config: str, weights: str, seed: int):
    """The model a config describes, randomly initialised from ``seed`` (or a state_dict file loaded into it)."""
    try:
        task = tasks.guess_model_task(config)
    except Exception:  # ultralytics guesses from the name and warns when it cannot: the build says more
        task = _detection()
    _check_task(name, task)
    with seeded(seed):
        try:
            model = tasks.DetectionModel(config, verbose=False)
        except (FileNotFoundError, OSError) as exc:
            raise UnknownModelError(
                f"{arg('model', name)}: no such config ({describe(exc)}); try yolo:{EXAMPLES[0]} or yolo:{EXAMPLES[2]}"
            ) from None
        except Exception as exc:  # a config ultralytics cannot build: one line, not its traceback
            raise _unbuilt(tasks, name, config, exc) from None
    _check_model(name, model)
    if weights_kind(weights) == "other":
        loaded = load_weights_file(model, weights)
        return model.float(), loaded.label, loaded.sha256
    return model.float(), f"none (random init from {config}, seed {seed})", None


def _unbuilt(tasks, name: str, config: str, exc: Exception) -> UnknownModelError:
    """Why a config did not build: a head other than YOLO's Detect (an open-vocabulary
    YOLO-World or YOLOE config, which ultralytics ships but builds only with text embeddings)
    is named with what hookviz explains instead; else the build's own error."""
    try:
        head = str(tasks.yaml_model_load(config)["head"][-1][2])
    except Exception:  # no head to read: the config itself is broken
        head = "Detect"
    if head != "Detect":
        return UnknownModelError(
            f"{arg('model', name)}: a model whose head is {head}, not a YOLO Detect head; hookviz explains plain YOLO "
            f"detection models, such as yolo:{EXAMPLES[0]} or yolo:{EXAMPLES[2]} ({hint('list_models')}), or a detect checkpoint"
        )
    return UnknownModelError(
        f"{arg('model', name)}: ultralytics cannot build it ({describe(exc)}); "
        f"compare it with a config ultralytics ships, such as yolo:{EXAMPLES[0]}"
    )


def _checkpoint(tasks, name: str, path: Path):
    """The model a trusted ultralytics checkpoint holds (its EMA copy when it has one)."""
    import torch

    # Unpickling may have run the file's code before it fails: the message says it was loaded.
    trusted = f"loaded as trusted ({arg('trust_checkpoint')}: any code in it has run), but"
    try:
        saved = torch.load(path, map_location="cpu", weights_only=False)  # trusted: the caller said so
    except Exception as exc:
        raise WeightsError(
            f"{arg('model', name)}: {trusted} it is not a YOLO checkpoint ({describe(exc)}); "
            "give a .pt file ultralytics saved (a training run's weights/best.pt)"
        ) from None
    model = (saved.get("ema") or saved.get("model")) if isinstance(saved, dict) else saved  # or torch.save(yolo.model)
    if not isinstance(model, torch.nn.Module):
        raise WeightsError(
            f"{arg('model', name)}: {trusted} it is not a YOLO checkpoint (no model in it, a {type(saved).__name__}); "
            "give a .pt file ultralytics saved"
        )
    _check_task(name, getattr(model, "task", None) or tasks.guess_model_task(model))
    _check_model(name, model)
    return model.float()


def _detection() -> str:
    """ultralytics' word for a detection model (``model.task``, ``guess_model_task``), which
    is hookviz's detection task's name too."""
    from hookviz.tasks.detect import Detect

    return Detect.name


def _check_task(name: str, task: str | None) -> None:
    if task != _detection():
        raise UnknownModelError(
            f"{arg('model', name)}: a YOLO {task or 'unknown'} model; hookviz explains YOLO detection models "
            f"(yolo:{EXAMPLES[0]}, a detect checkpoint)"
        )


def _check_model(name: str, model) -> None:
    from ultralytics.nn.modules.head import Detect
    from ultralytics.nn.tasks import DetectionModel

    if type(model) is not DetectionModel:  # segment, pose, OBB, RT-DETR and open-vocabulary models subclass it
        raise UnknownModelError(
            f"{arg('model', name)}: a {type(model).__name__}; hookviz explains plain YOLO detection models "
            f"(yolo:{EXAMPLES[0]}, a detect checkpoint)"
        )
    *_, head = model.get_submodule("model").children()  # the detect head: the last layer of its Sequential
    if not isinstance(head, Detect):  # a config builds a DetectionModel around any head (rtdetr-l.yaml's decoder)
        raise UnknownModelError(
            f"{arg('model', name)}: a model whose head is {type(head).__name__}, not a YOLO Detect head; hookviz "
            f"explains YOLO detection models (yolo:{EXAMPLES[0]}, a detect checkpoint)"
        )
    if getattr(head, "end2end", False):
        raise UnknownModelError(
            f"{arg('model', name)}: an NMS-free (end-to-end) head; hookviz explains the boxes a YOLO head's NMS keeps "
            f"(yolo:{EXAMPLES[0]}, yolo:{EXAMPLES[2]})"
        )


def _categories(model) -> tuple[str, ...] | None:
    names = getattr(model, "names", None)
    if not isinstance(names, dict) or not names:
        return None
    ordered = [str(names.get(k, k)) for k in range(max(names) + 1)]
    return None if ordered == [str(k) for k in range(len(ordered))] else tuple(ordered)  # a config's "0", "1": none


# The wrapper is defined on first use: torch is not imported by ``hookviz --help``.
def YoloDetector(model):  # noqa: N802  (it builds a module)
    """``model`` (an ultralytics ``DetectionModel``) as a torchvision-style detector; see ``yolo_detector``."""
    from hookviz.models.sources.yolo_detector import YoloDetector as Detector

    return Detector(
        model, image_size=IMAGE_SIZE, score_threshold=SCORE_THRESHOLD, iou_threshold=IOU_THRESHOLD, scores_are=SCORES_ARE
    )
