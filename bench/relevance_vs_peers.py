"""The relevance-propagation methods against their references, side by side in one process:
hookviz's ``lrp`` against zennit's own ``Gradient`` attributor (epsilon-plus-flat, the same
canonizers) on random-weight vgg11_bn and resnet18, and ``attnlrp`` against LXT's efficient
mode (its patches applied around its pass) on torchvision's vit_b_16 with random weights;
beside them a plain forward and backward pass of the same model, the least any of them can
cost. hookviz's time is the whole explanation of a tensor (its pass, statistics and the
map), given one recorded layer. Prints medians of wall time per image and the ratio
reference / hookviz (above 1: hookviz is faster). Asserts nothing.

    OMP_NUM_THREADS=1 python bench/relevance_vs_peers.py [--size 224] [--repeats 3] [--vit-size 224]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch
import torchvision

import hookviz
from hookviz import InputOptions


def _timed(function, repeats: int) -> float:
    function()  # warm: first-call costs (imports, allocation) are not the method's
    walls = []
    for _ in range(repeats):
        wall = time.perf_counter()
        function()
        walls.append(time.perf_counter() - wall)
    return statistics.median(walls) * 1000


def _plain(model, x, target: int):
    x = x.clone().requires_grad_(True)
    model(x)[:, target].sum().backward()


def _zennit(model, x, target: int, canonizer):
    from zennit.attribution import Gradient
    from zennit.composites import EpsilonPlusFlat

    with Gradient(model, EpsilonPlusFlat(canonizers=[canonizer()])) as attributor:
        return attributor(x, lambda out: torch.eye(out.shape[1])[[target]] * out)[1]


def _row(what: str, ours: float, theirs: float, plain: float) -> None:
    print(f"{what:<44}{ours:>12.0f}{theirs:>14.0f}{theirs / ours:>10.2f}{plain:>16.0f}")


def _cnn(name: str, layer: str, canonizer, args) -> None:
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None).eval()
    x = torch.randn(1, 3, args.size, args.size)
    ours = _timed(lambda: hookviz.explain(model, x[0], layers=[layer], target=8, cam="lrp"), args.repeats)
    twin = copy.deepcopy(model)
    theirs = _timed(lambda: _zennit(twin, x, 8, canonizer), args.repeats)
    _row(f"lrp vs zennit, {name}, {args.size} px", ours, theirs, _timed(lambda: _plain(twin, x, 8), args.repeats))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--vit-size", type=int, default=224)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from zennit.torchvision import ResNetCanonizer, VGGCanonizer

    from tests.test_attnlrp import lxt_maps

    print(f"random weights, {args.repeats} repeats, torch threads {torch.get_num_threads()}; wall ms per image")
    print(f"{'what':<44}{'hookviz':>12}{'reference':>14}{'ref/ours':>10}{'fwd+bwd alone':>16}")
    for name, layer, canonizer in (("vgg11_bn", "features.0", VGGCanonizer), ("resnet18", "layer4", ResNetCanonizer)):
        _cnn(name, layer, canonizer, args)
    torch.manual_seed(0)
    vit = torchvision.models.vit_b_16(weights=None, image_size=args.vit_size).eval()
    torch.nn.init.normal_(vit.heads.head.weight, std=0.02)
    x = torch.randn(1, 3, args.vit_size, args.vit_size)
    size = InputOptions(resize=args.vit_size, crop=args.vit_size)  # the ViT's own size, for hookviz's dry pass
    ours = _timed(lambda: hookviz.explain(vit, x[0], layers=["conv_proj"], target=3, cam="attnlrp", inputs=size), args.repeats)
    twin = copy.deepcopy(vit)
    theirs = _timed(lambda: lxt_maps(twin, x), args.repeats)
    _row(f"attnlrp vs LXT, vit_b_16, {args.vit_size} px", ours, theirs, _timed(lambda: _plain(twin, x, 3), args.repeats))


if __name__ == "__main__":
    main()
