"""pytorch-grad-cam's loop for Score-CAM, as its README writes it, one CAM picture per photo.

Per photo: the torchvision preprocessing (resize 256, centre crop 224, ImageNet
normalisation), ``ScoreCAM(model, target_layers=[model.layer4[-1]])`` called with no targets
(the predicted class), ``show_cam_on_image`` over the cropped photo and ``cv2.imwrite``. The
only changes: random weights from seed 0 instead of a download (the cost is the same; hookviz's
``--weights none`` seeds 0 too) and the progress bars off.

Usage: python scorecam_loop.py OUT_DIR IMAGE [IMAGE ...]
"""

import sys
from functools import partialmethod
from pathlib import Path

import cv2
import numpy as np
import torch
import torchvision
import tqdm
from PIL import Image
from pytorch_grad_cam import ScoreCAM
from pytorch_grad_cam.utils.image import show_cam_on_image
from torchvision import transforms

tqdm.tqdm.__init__ = partialmethod(tqdm.tqdm.__init__, disable=True)  # type: ignore[method-assign]


def main(out: Path, paths: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    crop = transforms.Compose([transforms.Resize(256), transforms.CenterCrop(224)])
    normalise = transforms.Compose([transforms.ToTensor(), transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).eval()
    with ScoreCAM(model=model, target_layers=[model.layer4[-1]]) as cam:
        for index, path in enumerate(paths):
            photo = crop(Image.open(path).convert("RGB"))
            input_tensor = normalise(photo).unsqueeze(0)
            grayscale_cam = cam(input_tensor=input_tensor, targets=None)[0, :]
            rgb_img = np.float32(photo) / 255
            visualization = show_cam_on_image(rgb_img, grayscale_cam, use_rgb=True)
            cv2.imwrite(str(out / f"{index:04d}-{Path(path).stem}.png"), cv2.cvtColor(visualization, cv2.COLOR_RGB2BGR))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
