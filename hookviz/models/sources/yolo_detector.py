"""An ultralytics ``DetectionModel`` that answers as torchvision's detectors do (``yolo_models``
builds it; this module imports torch, so it is imported only when a YOLO model is loaded)."""

from __future__ import annotations

import torch
from torch import nn
from torchvision.models.detection.image_list import ImageList

__all__ = ["YoloDetector", "Letterbox"]


class Letterbox(nn.Module):
    """Photos (C, H, W) in [0, 1] -> one padded batch: each resized to ``image_size`` on its long
    side, a small photo enlarged as a large one is shrunk (ultralytics' predict: its
    ``LetterBox`` scales up, and a model trained at 640 sees objects at that scale), then padded
    with its grey (114) to a common size that is a multiple of ``stride`` (for one photo, the
    size ``LetterBox(640, auto=True, stride=32)`` gives). The padding goes right and below, not
    split around the photo as ultralytics centres it, so each photo's boxes only scale back.
    Returns ``(ImageList, scales)`` as torchvision's ``GeneralizedRCNNTransform`` returns its
    batch, so the detection task reads where each photo lies in it."""

    def __init__(self, stride: int, image_size: int):
        super().__init__()
        self.stride, self.image_size = stride, image_size

    def forward(self, images):
        resized, scales = [], []
        for image in images:
            scale = self.image_size / max(image.shape[-2:])
            size = [max(1, round(side * scale)) for side in image.shape[-2:]]  # as LetterBox rounds them
            if size != list(image.shape[-2:]):  # bilinear, not antialiased: cv2's INTER_LINEAR, as LetterBox resizes
                image = nn.functional.interpolate(image[None], size=size, mode="bilinear", align_corners=False)[0]
            resized.append(image)
            scales.append(scale)
        height = max(image.shape[-2] for image in resized)
        width = max(image.shape[-1] for image in resized)
        height, width = (-(-side // self.stride) * self.stride for side in (height, width))
        batch = resized[0].new_full((len(resized), resized[0].shape[0], height, width), 114 / 255)
        for k, image in enumerate(resized):
            batch[k, :, : image.shape[-2], : image.shape[-1]] = image
        return ImageList(batch, [tuple(image.shape[-2:]) for image in resized]), scales


class YoloDetector(nn.Module):
    """Per photo, a dict of ``boxes`` (x0, y0, x1, y1 in the photo's pixels), ``labels`` and
    ``scores``: the boxes the model's NMS keeps at ``score_thresh``, each scored by its class
    score at its anchor in the raw prediction (so the score's gradient is the anchor's), with
    ``anchors`` and ``strides``: where each was read.

    Attributes:
        yolo: the ultralytics model.
        score_thresh: NMS's score cut (the detection task lowers it to its own threshold).
        scores_are: what the scores are, in words (report.json says it).
        neck_layers: the paths of the feature maps the detect head reads, finest first.
    """

    def __init__(self, model, image_size: int, score_threshold: float, iou_threshold: float, scores_are: str):
        super().__init__()
        self.yolo = model
        head = model.model[-1]
        self.strides = tuple(int(s) for s in head.stride)
        self.neck_layers = tuple(f"yolo.model.{index}" for index in head.f)
        self.transform = Letterbox(max(self.strides), image_size)
        self.score_thresh = float(score_threshold)
        self.iou_thresh = float(iou_threshold)
        self.scores_are = scores_are

    def forward(self, images) -> list[dict]:
        from ultralytics.utils.nms import non_max_suppression

        batch, scales = self.transform(list(images))
        output = self.yolo(batch.tensors)
        raw = output[0] if isinstance(output, (tuple, list)) else output  # (N, 4 + classes, anchors), boxes as xywh
        kept, anchors = non_max_suppression(
            raw.detach(),
            conf_thres=self.score_thresh,
            iou_thres=self.iou_thresh,
            return_idxs=True,
        )
        levels = self._levels(batch.tensors.shape[-2:], raw.device)
        return [self._detections(raw[k], found, anchors[k].long().reshape(-1), levels, scales[k]) for k, found in enumerate(kept)]

    def _levels(self, size, device) -> torch.Tensor:
        """The stride of each anchor (anchors run finest level first, row by row)."""
        return torch.cat(
            [torch.full(((size[0] // s) * (size[1] // s),), s, device=device, dtype=torch.long) for s in self.strides]
        )

    @staticmethod
    def _detections(raw, found, anchors, levels, scale: float) -> dict:
        labels = found[:, 5].long()
        xywh = raw[:4, anchors].T
        boxes = torch.cat([xywh[:, :2] - xywh[:, 2:] / 2, xywh[:, :2] + xywh[:, 2:] / 2], dim=1) / scale
        scores = raw[4 + labels, anchors]
        return {"boxes": boxes, "labels": labels, "scores": scores, "anchors": anchors, "strides": levels[anchors]}
