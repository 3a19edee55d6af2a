"""Integrated gradients against captum's, side by side in one process, taking turns:

  (1) speed at equal steps: ``hookviz.explain(..., cam="integrated-gradients", steps=32)`` (the
      whole explanation: preparing the photo, the recorded pass, the steps, the completeness
      figures) against captum's ``IntegratedGradients.attribute(n_steps=32)`` on the prepared
      input (the steps alone), torchvision's resnet18 with random weights, 224 px (``--size``);
  (2) ``--steps auto`` against captum's default of 50 steps: the steps each ran and the
      completeness error each left (captum's convergence delta), captum's error at each step
      count of a ladder, and the fewest of those steps whose error is under auto's tolerance
      (1%), on a nearly straight path (resnet18, random weights) and a bent one
      (EfficientNet-Lite0's ImageNet weights, the demo cat).

Medians of the process's CPU time (wall in brackets); peer / hookviz above 1: hookviz is faster.
Run it with one torch thread: with more, OpenMP's waiting threads spin, and on a loaded machine
that spinning fills the CPU time (0.41x at two threads under a load of 13, measured by wall
clock as unreliably). Asserts nothing.

    OMP_NUM_THREADS=1 python bench/ig_vs_captum.py [--repeats 5] [--size 224] [--skip-speed] [--skip-auto]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torchvision

import hookviz
from hookviz import InputOptions
from hookviz.input_format import channels_last_gradients
from hookviz.methods.integrated_gradients import AUTO_TOLERANCE

PHOTO = "sample_images/cat.png"
#: captum's default number of steps (``IntegratedGradients.attribute(n_steps=50)``).
CAPTUM_STEPS = 50
#: captum's step counts tried when its 50 leave a larger error than auto's rule did.
CAPTUM_LADDER = (50, 64, 96, 128, 192, 256, 384, 512)


def _clock(function) -> tuple[float, float, object]:
    wall, cpu = time.perf_counter(), time.process_time()
    result = function()
    return time.process_time() - cpu, time.perf_counter() - wall, result


def speed(repeats: int, size: int) -> None:
    from captum.attr import IntegratedGradients

    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).eval()
    sized = InputOptions(resize=size, crop=size)
    first = hookviz.explain(model, PHOTO, layers="layer4.1", cam="gradcam", inputs=sized)
    x, target = first.image.tensor[None].float(), first.target.index
    ig = IntegratedGradients(model)

    def ours():
        return hookviz.explain(model, PHOTO, layers="layer4.1", cam="integrated-gradients", steps=32, inputs=sized)

    def theirs():
        return ig.attribute(x, target=target, n_steps=32, method="gausslegendre", internal_batch_size=32)

    ours(), theirs()  # first-call costs out of the medians
    mine, peer, ratios = [], [], []
    for _ in range(repeats):  # in turn, so that the machine's drift falls on both
        mine.append(_clock(ours)[:2])
        peer.append(_clock(theirs)[:2])
        ratios.append(peer[-1][0] / mine[-1][0])
    m, p = (statistics.median(c for c, _ in runs) for runs in (mine, peer))
    mw, pw = (statistics.median(w for _, w in runs) for runs in (mine, peer))
    layout = "channels-last" if channels_last_gradients(model) else "as it came"
    print(f"(1) resnet18, random weights, {size} px, 32 steps, {repeats} turns, torch threads {torch.get_num_threads()}")
    print(f"    hookviz's passes: {layout}, as many rows as its memory budget holds; captum's: as it came, 32 rows")
    print(f"    hookviz {1000 * m:.0f} ms ({1000 * mw:.0f} wall), captum {1000 * p:.0f} ms ({1000 * pw:.0f} wall)")
    print(f"    captum / hookviz: {p / m:.2f} (medians), {statistics.median(ratios):.2f} (median of the turns' ratios)")


def _captum_error(ig, x, target: int, steps: int, change: float) -> float:
    _, delta = ig.attribute(
        x, target=target, n_steps=steps, method="gausslegendre", return_convergence_delta=True, internal_batch_size=32
    )
    return abs(float(delta)) / abs(change)


def auto(label: str, model, explained) -> None:
    from captum.attr import IntegratedGradients

    cpu, wall, result = _clock(explained)
    figures = result.pixel_maps["integrated-gradients"].figures
    x, target, change = result.image.tensor[None].float(), result.target.index, figures["score_change"]
    ig = IntegratedGradients(model)
    t_cpu, t_wall, at_default = _clock(lambda: _captum_error(ig, x, target, CAPTUM_STEPS, change))
    needed, error, errors = CAPTUM_STEPS, at_default, [f"{CAPTUM_STEPS}: {at_default:.1e}"]
    for steps in CAPTUM_LADDER[1:]:
        if error <= AUTO_TOLERANCE:
            break
        needed, error = steps, _captum_error(ig, x, target, steps, change)
        errors.append(f"{steps}: {error:.1e}")
    print(f"(2) {label}: S(x) - S(zeros) = {change:.4g}")
    print(
        f"    hookviz --steps auto: {figures['steps']:.0f} steps kept ({figures['steps_tried']:.0f} run in all), "
        f"relative error {figures['relative_error']:.2e}; {1000 * cpu:.0f} ms ({1000 * wall:.0f} wall), whole explanation"
    )
    print(f"    captum, {CAPTUM_STEPS} steps: relative error {at_default:.2e}; {1000 * t_cpu:.0f} ms ({1000 * t_wall:.0f} wall)")
    reached = "" if error <= AUTO_TOLERANCE else f" (not reached by {CAPTUM_LADDER[-1]})"
    print(f"    captum's relative error by its steps (Gauss-Legendre's error need not fall with every step): {', '.join(errors)}")
    print(
        f"    captum's rule under auto's tolerance ({AUTO_TOLERANCE:.0%}): {needed} steps{reached}; "
        f"steps saved against captum's {CAPTUM_STEPS}: {CAPTUM_STEPS - figures['steps_tried']:.0f} "
        f"(at equal tolerance, against {needed}: {needed - figures['steps_tried']:.0f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--size", type=int, default=224, help="(1)'s photo size")
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--skip-auto", action="store_true")
    args = parser.parse_args()
    if not args.skip_speed:
        speed(args.repeats, args.size)
    if args.skip_auto:
        return
    torch.manual_seed(0)
    resnet = torchvision.models.resnet18(weights=None).eval()
    auto(
        "resnet18, random weights, 224 px (a nearly straight path)",
        resnet,
        lambda: hookviz.explain(resnet, PHOTO, layers="layer4.1", cam="integrated-gradients", steps="auto"),
    )
    from hookviz.models.loading import load_model

    lite = load_model("efficientnet_lite0")
    auto(
        "EfficientNet-Lite0, ImageNet weights, the demo cat (a bent path)",
        lite.module.eval(),
        lambda: hookviz.explain(lite, PHOTO, layers="_blocks.-1", cam="integrated-gradients", steps="auto"),
    )


if __name__ == "__main__":
    main()
