"""The relevance-propagation methods against their references, side by side in one process:
hookviz's ``lrp`` against zennit's own ``Gradient`` attributor (epsilon-plus-flat, the same
canonizers) on random-weight vgg11_bn and resnet18, and ``attnlrp`` against LXT's efficient
mode (its patches applied around its pass) on torchvision's vit_b_16 with random weights;
beside them a plain forward and backward pass of the same model, the least any of them can
cost.

hookviz's time is the whole explanation of a tensor, given one recorded layer, three ways:
the bare module (hookviz reads its task from a dry pass first, at the input's size), the
``LoadedModel`` a source gives (``hookviz run --model``: its task known, no dry pass), and
that same model with ``--cam none`` (the recording pass alone: the layer's summaries, its
forward and backward pass). The method's own increment is the difference of the last two.
``alone`` is the loaded model's explanation given no layer (the method alone: no layer is
recorded, the prediction read from a pass without a graph), what ``hookviz run --cam lrp`` makes.
Every time is the median of ``--repeats`` runs of the process's CPU time (one torch
thread: on a machine shared with other jobs, CPU time moves less than wall time), after one
warm run. Prints milliseconds per image and the ratios reference / hookviz (above 1:
hookviz is faster). Asserts nothing.

    OMP_NUM_THREADS=1 python bench/relevance_vs_peers.py [--size 224] [--repeats 5] [--vit-size 224]
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
from hookviz.inputs.images import Preprocessing
from hookviz.models.sources.base import LoadedModel

HEADS = ("what", "ref", "bare", "r/bare", "loaded", "r/load", "none", "own", "r/own", "alone", "r/alon", "fwd+bwd")


def _timed(function, repeats: int) -> float:
    function()  # warm: first-call costs (imports, allocation) are not the method's
    times = []
    for _ in range(repeats):
        began = time.process_time()
        function()
        times.append(time.process_time() - began)
    return statistics.median(times) * 1000


def _plain(model, x, target: int):
    x = x.clone().requires_grad_(True)
    model(x)[:, target].sum().backward()


def _zennit(model, x, target: int, canonizer):
    from zennit.attribution import Gradient
    from zennit.composites import EpsilonPlusFlat

    with Gradient(model, EpsilonPlusFlat(canonizers=[canonizer()])) as attributor:
        return attributor(x, lambda out: torch.eye(out.shape[1])[[target]] * out)[1]


def _row(what: str, method: str, model, x, explained: dict, reference, repeats: int) -> None:
    """One line: the reference, the bare module's whole run, the loaded model's whole run, its
    ``--cam none`` run, the method's own increment, and the plain pass."""
    loaded = LoadedModel(what, model, "random", None, Preprocessing(), task="classify")
    twin = copy.deepcopy(model)
    theirs = _timed(lambda: reference(twin, x), repeats)
    bare = _timed(lambda: hookviz.explain(model, x[0], cam=method, **explained), repeats)
    whole = _timed(lambda: hookviz.explain(loaded, x[0], cam=method, **explained), repeats)
    alone = _timed(lambda: hookviz.explain(loaded, x[0], cam="none", **explained), repeats)
    method_alone = whole - alone
    unlayered = {key: value for key, value in explained.items() if key != "layers"}  # no layer: none recorded
    single = _timed(lambda: hookviz.explain(loaded, x[0], cam=method, **unlayered), repeats)
    plain = _timed(lambda: _plain(twin, x, explained["target"]), repeats)
    print(
        f"{what:<34}{theirs:>8.0f}{bare:>8.0f}{theirs / bare:>7.2f}{whole:>8.0f}{theirs / whole:>7.2f}"
        f"{alone:>8.0f}{method_alone:>8.0f}{theirs / method_alone:>7.2f}{single:>8.0f}{theirs / single:>7.2f}{plain:>8.0f}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--vit-size", type=int, default=224)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--skip-vit", action="store_true")
    args = parser.parse_args()
    from zennit.torchvision import ResNetCanonizer, VGGCanonizer

    from tests.test_attnlrp import lxt_maps

    print(f"random weights, median of {args.repeats}, torch threads {torch.get_num_threads()}; CPU ms per image")
    print(f"{HEADS[0]:<34}" + "".join(f"{h:>{7 if h.startswith('r/') else 8}}" for h in HEADS[1:]))
    for name, layer, canonizer in (("vgg11_bn", "features.0", VGGCanonizer), ("resnet18", "layer4", ResNetCanonizer)):
        torch.manual_seed(0)
        model = getattr(torchvision.models, name)(weights=None).eval()
        x = torch.randn(1, 3, args.size, args.size)
        explained = {"layers": [layer], "target": 8, "inputs": InputOptions(resize=args.size, crop=args.size)}
        zennit = lambda m, x, canonizer=canonizer: _zennit(m, x, 8, canonizer)  # noqa: E731
        _row(f"lrp vs zennit, {name}, {args.size} px", "lrp", model, x, explained, zennit, args.repeats)
    if args.skip_vit:
        return
    torch.manual_seed(0)
    vit = torchvision.models.vit_b_16(weights=None, image_size=args.vit_size).eval()
    torch.nn.init.normal_(vit.heads.head.weight, std=0.02)
    x = torch.randn(1, 3, args.vit_size, args.vit_size)
    explained = {"layers": ["conv_proj"], "target": 3, "inputs": InputOptions(resize=args.vit_size, crop=args.vit_size)}
    _row(f"attnlrp vs LXT, vit_b_16, {args.vit_size} px", "attnlrp", vit, x, explained, lxt_maps, args.repeats)


if __name__ == "__main__":
    main()
