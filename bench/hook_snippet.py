"""The usual hook snippet, as the blog posts on layer visualisation write it (a SaveValues class).

A ``SaveValues`` class with ``register_forward_hook`` and ``register_full_backward_hook`` on
resnet50 ``layer3[-1]``, CrossEntropyLoss against class 0, ``loss.backward()`` (parameter
gradients included) and the 2x2 ``plt.imshow`` figure of the channel-summed maps, saved per image.
The only changes: ``weights=None`` instead of a downloaded .pth (the cost is the same), the Agg
backend, and ``savefig`` instead of ``show``.

Usage: python hook_snippet.py OUT_DIR IMAGE [IMAGE ...]
"""

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torchvision.models as models  # noqa: E402
from PIL import Image  # noqa: E402
from torchvision import transforms  # noqa: E402


class SaveValues:
    def __init__(self, layer):
        self.model = None
        self.input = None
        self.output = None
        self.grad_input = None
        self.grad_output = None
        self.forward_hook = layer.register_forward_hook(self.hook_fn_act)
        self.backward_hook = layer.register_full_backward_hook(self.hook_fn_grad)

    def hook_fn_act(self, module, input, output):
        self.model = module
        self.input = input[0]
        self.output = output

    def hook_fn_grad(self, module, grad_input, grad_output):
        self.grad_input = grad_input[0]
        self.grad_output = grad_output[0]

    def remove(self):
        self.forward_hook.remove()
        self.backward_hook.remove()


def main(out: Path, paths: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    data_transform = transforms.Compose(
        [
            transforms.Resize(256),
            transforms.CenterCrop(224),
            transforms.ToTensor(),
            transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
        ]
    )
    res50_model = models.resnet50(weights=None)
    loss_function = nn.CrossEntropyLoss()
    value = SaveValues(res50_model.layer3[-1])
    for index, img_path in enumerate(paths):
        img = data_transform(Image.open(img_path).convert("RGB"))
        img = torch.unsqueeze(img, dim=0)
        gt = torch.tensor([0])
        res50_model.zero_grad()
        y = res50_model(img)
        loss = loss_function(y, gt)
        loss.backward()
        plt.figure()
        for position, (title, tensor) in enumerate(
            [
                ("input", value.input),
                ("output", value.output),
                ("grad_input", value.grad_input),
                ("grad_output", value.grad_output),
            ],
            start=1,
        ):
            plt.subplot(2, 2, position)
            plt.axis("off")
            plt.title(title)
            plt.imshow(tensor.detach().numpy()[0, :, :, :].sum(axis=0))
        plt.savefig(out / f"{index:04d}-{Path(img_path).stem}.png")
        plt.close()
    value.remove()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
