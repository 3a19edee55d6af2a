"""pytorch-grad-cam's object-detection tutorial loop, drawing the pictures hookviz draws for a detector.

The tutorial ("Class Activation Maps for Object Detection With Faster RCNN", in
pytorch-grad-cam's book): per photo, a prediction pass under ``torch.no_grad`` for the
boxes, ``draw_boxes``, then the CAM with ``FasterRCNNBoxScoreTarget`` and
``show_cam_on_image``. As hookviz does for a detector, here each detection gets a CAM of
its own (with its box), at the backbone's last feature map, and the boxes get a picture of
their own; all are saved as PNG. The only other changes: random weights instead of a
download (the cost is the same) and the detector's score cut lowered to ``THRESHOLD``, so
that random weights give detections.

Usage: python detection_loop.py OUT_DIR IMAGE [IMAGE ...]
"""

import sys
from pathlib import Path

import cv2
import numpy as np
import torch
import torchvision
from PIL import Image
from pytorch_grad_cam import GradCAM
from pytorch_grad_cam.utils.image import show_cam_on_image
from pytorch_grad_cam.utils.model_targets import FasterRCNNBoxScoreTarget
from torchvision import transforms

THRESHOLD = 0.01
MOST = 3


def predict(input_tensor, model, threshold):
    with torch.no_grad():
        outputs = model(input_tensor)
    keep = outputs[0]["scores"] >= threshold
    boxes = outputs[0]["boxes"][keep][:MOST].numpy()
    labels = outputs[0]["labels"][keep][:MOST].numpy()
    return boxes, labels


def draw_boxes(boxes, labels, image):
    for box, label in zip(boxes, labels):
        x0, y0, x1, y1 = (int(v) for v in box)
        cv2.rectangle(image, (x0, y0), (x1, y1), (255, 255, 255), 2)
        cv2.putText(image, str(label), (x0, y0 - 5), cv2.FONT_HERSHEY_SIMPLEX, 0.8, (255, 255, 255), 2, lineType=cv2.LINE_AA)
    return image


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    model = torchvision.models.detection.fasterrcnn_mobilenet_v3_large_320_fpn(weights=None, weights_backbone=None)
    model.eval()
    model.roi_heads.score_thresh = THRESHOLD
    target_layers = [model.backbone.body.get_submodule("16")]  # hookviz's default: the backbone's last feature map
    for path in map(Path, sys.argv[2:]):
        image = np.array(Image.open(path).convert("RGB"))
        image_float_np = np.float32(image) / 255
        input_tensor = transforms.ToTensor()(image).unsqueeze(0)
        boxes, labels = predict(input_tensor, model, THRESHOLD)
        Image.fromarray(draw_boxes(boxes, labels, image.copy())).save(out / f"{path.stem}.boxes.png")
        with GradCAM(model, target_layers) as cam:
            for k, (box, label) in enumerate(zip(boxes, labels)):
                grayscale_cam = cam(input_tensor, targets=[FasterRCNNBoxScoreTarget([label], [box])])[0]
                cam_image = show_cam_on_image(image_float_np, grayscale_cam, use_rgb=True)
                Image.fromarray(draw_boxes([box], [label], cam_image)).save(out / f"{path.stem}.cam{k}.png")


if __name__ == "__main__":
    main()
