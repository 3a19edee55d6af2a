"""What --faithfulness and --sanity cost per clip: forward passes (clips through the network)
and seconds, on a tiny Conv3d classifier (two 3-D convolutions, 16 frames of 112 x 112) and on
torchvision's r3d_18 (random weights, 16 x 112 x 112), Grad-CAM at the last convolution.
Seconds of the process's CPU time beside the wall clock (a shared machine's wall clock counts
the other processes' turns too).

    OMP_NUM_THREADS=1 python bench/video_trust_cost.py [--frames 16] [--size 112] [--r3d]
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn as nn

import hookviz
from tests.video_clips import VideoNet


def cost(model: nn.Module, layer: str, clip: torch.Tensor) -> None:
    rows: list[int] = []
    handle = model.register_forward_pre_hook(lambda _m, args: rows.append(int(args[0].shape[0])))
    try:
        for name, keywords in (("plain", {}), ("faithfulness", {"faithfulness": True}), ("sanity", {"sanity": True})):
            rows.clear()
            start, cpu = time.perf_counter(), time.process_time()
            hookviz.explain(model, clip, layers=[layer], **keywords)
            wall, used = time.perf_counter() - start, time.process_time() - cpu
            print(f"  {name:>12}: {wall:7.2f} s wall, {used:7.2f} s CPU, {sum(rows):5d} clips through the network")
    finally:
        handle.remove()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--frames", type=int, default=16)
    parser.add_argument("--size", type=int, default=112)
    parser.add_argument("--r3d", action="store_true", help="also torchvision's r3d_18 (random weights)")
    options = parser.parse_args()
    torch.manual_seed(0)
    clip = torch.randn(3, options.frames, options.size, options.size)
    print(f"one clip of {options.frames} x {options.size} x {options.size}, Grad-CAM")
    print("tiny Conv3d, layer features.3:")
    cost(VideoNet().eval(), "features.3", clip)
    if options.r3d:
        import torchvision

        model = torchvision.models.video.r3d_18(weights=None).eval()
        model.hookviz_sample_kind = "video"
        print("r3d_18, layer layer4:")
        cost(model, "layer4", clip)


if __name__ == "__main__":
    main()
