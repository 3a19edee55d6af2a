"""An ultralytics ``DetectionModel`` that answers as torchvision's detectors do (``yolo_models``
builds it; this module imports torch, so it is imported only when a YOLO model is loaded)."""

from __future__ import annotations

import torch
from torch import nn
from torchvision.models.detection.image_list import ImageList

__all__ = ["YoloDetector", "Letterbox", "PlacedImages"]


class PlacedImages(ImageList):
    """torchvision's ``ImageList`` (the padded batch and each photo's resized ``image_sizes``),
    and ``offsets``: where each photo's top-left corner lies in the batch, (top, left) in
    pixels. torchvision's detectors put every photo at (0, 0), and their ``ImageList`` has no
    ``offsets``."""

    def __init__(self, tensors: torch.Tensor, image_sizes: list[tuple[int, int]], offsets: list[tuple[int, int]]):
        super().__init__(tensors, image_sizes)
        self.offsets = offsets


class Letterbox(nn.Module):
    """Photos (C, H, W) in [0, 1] -> one padded batch, as ultralytics' predictor letterboxes it
    (its ``pre_transform``, ``LetterBox``): each photo resized to ``image_size`` on its long
    side (a small photo enlarged as a large one is shrunk: a model trained at 640 sees objects
    at that scale), bilinear and not antialiased as cv2's ``INTER_LINEAR`` resizes, and centred
    in grey (114) padding split as ``LetterBox`` splits it (``round(d/2 - 0.1)`` above and to
    the left). Photos of one shape are padded to the smallest multiple of ``stride`` (its
    ``auto``); photos of different shapes to the square ``image_size``.

    Returns ``(PlacedImages, scales)``: the batch, as torchvision's
    ``GeneralizedRCNNTransform`` returns its ``ImageList`` (the detection task reads where each
    photo lies in it), and per photo the (y, x) scales from photo to batch pixels."""

    def __init__(self, stride: int, image_size: int):
        super().__init__()
        self.stride, self.image_size = stride, image_size

    def forward(self, images) -> tuple[PlacedImages, list[tuple[float, float]]]:
        resized = [self._resized(image) for image in images]
        if len({tuple(image.shape) for image in images}) == 1:  # ultralytics' auto: the least padding
            height, width = (side + (self.image_size - side) % self.stride for side in resized[0].shape[-2:])
        else:
            height = width = self.image_size
        batch = resized[0].new_full((len(resized), resized[0].shape[0], height, width), 114 / 255)
        offsets = []
        for k, image in enumerate(resized):
            top, left = (round((padded - side) / 2 - 0.1) for padded, side in zip((height, width), image.shape[-2:]))
            batch[k, :, top : top + image.shape[-2], left : left + image.shape[-1]] = image
            offsets.append((top, left))
        sizes = [(image.shape[-2], image.shape[-1]) for image in resized]
        scales = [(new[0] / old.shape[-2], new[1] / old.shape[-1]) for new, old in zip(sizes, images)]
        return PlacedImages(batch, sizes, offsets), scales

    def _resized(self, image: torch.Tensor) -> torch.Tensor:
        scale = self.image_size / max(image.shape[-2:])
        size = [max(1, round(side * scale)) for side in image.shape[-2:]]  # as LetterBox rounds them
        if size == list(image.shape[-2:]):
            return image
        return nn.functional.interpolate(image[None], size=size, mode="bilinear", align_corners=False)[0]


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

        images = list(images)
        batch, scales = self.transform(images)
        output = self.yolo(batch.tensors)
        raw = output[0] if isinstance(output, (tuple, list)) else output  # (N, 4 + classes, anchors), boxes as xywh
        kept, anchors = non_max_suppression(
            raw.detach(),
            conf_thres=self.score_thresh,
            iou_thres=self.iou_thresh,
            return_idxs=True,
        )
        levels = self._levels(batch.tensors.shape[-2:], raw.device)
        return [
            self._detections(raw[k], found, anchors[k].long().reshape(-1), levels, _Placement(image, batch, scales, k))
            for k, (image, found) in enumerate(zip(images, kept))
        ]

    def _levels(self, size, device) -> torch.Tensor:
        """The stride of each anchor (anchors run finest level first, row by row)."""
        return torch.cat(
            [torch.full(((size[0] // s) * (size[1] // s),), s, device=device, dtype=torch.long) for s in self.strides]
        )

    @staticmethod
    def _detections(raw, found, anchors, levels, placed: _Placement) -> dict:
        labels = found[:, 5].long()
        xywh = raw[:4, anchors].T
        corners = torch.cat([xywh[:, :2] - xywh[:, 2:] / 2, xywh[:, :2] + xywh[:, 2:] / 2], dim=1)
        boxes = placed.to_photo(corners)
        scores = raw[4 + labels, anchors]
        return {"boxes": boxes, "labels": labels, "scores": scores, "anchors": anchors, "strides": levels[anchors]}


class _Placement:
    """Where one photo lies in the letterboxed batch, to take boxes back to the photo."""

    def __init__(self, image: torch.Tensor, batch: PlacedImages, scales: list, k: int):
        self.height, self.width = image.shape[-2:]
        self.top, self.left = batch.offsets[k]
        self.scale_y, self.scale_x = scales[k]

    def to_photo(self, corners: torch.Tensor) -> torch.Tensor:
        """Boxes (x0, y0, x1, y1) in batch pixels -> in the photo's pixels, clipped to it (as
        ultralytics' ``scale_boxes`` and torchvision's detectors clip them)."""
        shift = corners.new_tensor([self.left, self.top, self.left, self.top])
        scale = corners.new_tensor([self.scale_x, self.scale_y, self.scale_x, self.scale_y])
        bound = corners.new_tensor([self.width, self.height, self.width, self.height])
        return torch.minimum(((corners - shift) / scale).clamp(min=0), bound)
