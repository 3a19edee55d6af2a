"""hookviz's run on video clips against pytorch-grad-cam's usual loop (issue 28, item 8).

20 clips of 16 frames, torchvision's r3d_18 with random weights (``r3d_18`` below: one factory,
so both load the same model), Grad-CAM at layer4, one picture per clip: the 16 frames side by
side with the CAM over each (hookviz's ``frames`` picture; the loop's strip drawn with
``show_cam_on_image``, as pytorch-grad-cam's README draws one photo). Both decode with PyAV
and see the clip at 112 x 112, r3d_18's own crop (its weights' transform resizes to 128 x 171).
Each side runs in a fresh child process, taking turns; seconds are the median of the runs,
peak memory the child's largest resident set.

    OMP_NUM_THREADS=1 python bench/video_vs_gradcam.py [--clips 20] [--repeat 3] [--size 112]
    python bench/video_vs_gradcam.py --loop OUT SIZE CLIP [CLIP ...]   (the peer's loop alone)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
FRAMES = 16
MEAN, STD = (0.43216, 0.394666, 0.37645), (0.22803, 0.22145, 0.216989)  # Kinetics-400, r3d_18's weights


def r3d_18():
    """torchvision's r3d_18, random weights (seed 0), declaring the video kind and 16 frames."""
    import torch
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.video.r3d_18(weights=None)
    model.hookviz_sample_kind, model.hookviz_clip_frames = "video", FRAMES
    return model


def encode_clips(folder: Path, count: int, size: int) -> list[Path]:
    """``count`` synthetic 16-frame clips (a square moving over grey) of ``size`` pixels a side."""
    import av

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for number in range(count):
        path = folder / f"clip{number:02d}.mp4"
        with av.open(str(path), "w") as out:
            stream = out.add_stream("mpeg4", rate=25)
            stream.width = stream.height = size
            stream.pix_fmt = "yuv420p"
            for index in range(FRAMES):
                pixels = np.full((size, size, 3), 30 + 5 * number, np.uint8)
                left = (index * size // 24 + number) % (size - size // 4)
                pixels[size // 3 : size // 3 + size // 4, left : left + size // 4] = (240, 180, 40)
                out.mux(stream.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")))
            out.mux(stream.encode())
        paths.append(path)
    return paths


def loop(out: Path, size: int, clips: list[Path]) -> None:
    """pytorch-grad-cam's usual loop: decode every frame with PyAV, keep 16 spread evenly, resize,
    normalise, GradCAM at layer4 on the 5-D clip, and save the frames with their CAMs as one strip."""
    import av
    import torch
    from PIL import Image
    from pytorch_grad_cam import GradCAM
    from pytorch_grad_cam.utils.image import show_cam_on_image

    model = r3d_18().eval()
    mean, std = torch.tensor(MEAN).view(3, 1, 1, 1), torch.tensor(STD).view(3, 1, 1, 1)
    out.mkdir(parents=True, exist_ok=True)
    with GradCAM(model=model, target_layers=[model.layer4]) as cam:
        for path in clips:
            with av.open(str(path)) as container:
                frames = [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]
            picked = [frames[int(i)] for i in np.linspace(0, len(frames) - 1, FRAMES).round()]
            rgb = np.stack([np.asarray(Image.fromarray(f).resize((size, size), Image.BILINEAR)) for f in picked])
            clip = (torch.from_numpy(rgb).permute(3, 0, 1, 2).float() / 255 - mean) / std
            maps = cam(input_tensor=clip[None], targets=None)[0]  # (T, H, W), the top class
            strip = np.hstack([show_cam_on_image(rgb[t] / 255.0, maps[t], use_rgb=True) for t in range(FRAMES)])
            Image.fromarray(strip).save(out / f"{path.stem}.png")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clips", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--size", type=int, default=112, help="the clips' side in pixels (r3d_18's own: 112)")
    parser.add_argument("--loop", nargs="+", metavar="ARG", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.loop:
        loop(Path(options.loop[0]), int(options.loop[1]), [Path(p) for p in options.loop[2:]])
        return
    sys.path.insert(0, str(ROOT))
    from bench.run import PY, hookviz, measure

    work = Path(tempfile.mkdtemp(prefix="hookviz-video-bench-"))
    clips = encode_clips(work / "clips", options.clips, options.size)
    size = str(options.size)
    scenarios = {
        "pytorch-grad-cam's loop": [PY, __file__, "--loop", str(work / "peer"), size, *map(str, clips)],
        "hookviz run --pictures cam": hookviz(
            "run", str(work / "clips"), "--model", "bench.video_vs_gradcam:r3d_18", "--layer", "layer4",
            "--resize", size, "--crop", size, "--mean", ",".join(map(str, MEAN)), "--std", ",".join(map(str, STD)),
            "--pictures", "cam", "-q", "--out", str(work / "hookviz"),
        ),
    }  # fmt: skip
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in scenarios}
    for _ in range(options.repeat):
        for name, command in scenarios.items():
            runs[name].append(measure(command))
    print(f"{options.clips} clips of {FRAMES} frames at {size} px, r3d_18 (random weights), Grad-CAM at layer4; "
          f"median of {options.repeat} runs")  # fmt: skip
    seconds = {name: statistics.median(s for s, _ in done) for name, done in runs.items()}
    for name, done in runs.items():
        print(f"  {name:32} {seconds[name]:7.1f} s {options.clips / seconds[name]:6.2f} clips/s "
              f"{max(p for _, p in done):7.0f} MB peak")  # fmt: skip
    peer, ours = seconds["pytorch-grad-cam's loop"], seconds["hookviz run --pictures cam"]
    print(f"hookviz / pytorch-grad-cam throughput: {peer / ours:.2f}x   (target at least 1.5x)")


if __name__ == "__main__":
    main()
