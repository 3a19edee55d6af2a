"""Grad-CAM of every answer token of a vision-language model costs one teacher-forced forward
pass and one backward pass per token: this times it on the tiny LLaVA of the tests (random
weights, 32x32 photo) against the naive way, one forward and one backward pass per token,
for T = 1, 4, 8 tokens, and prints median CPU seconds of alternating repeats.

    PYTHONPATH=. python bench/vlm_gradcam.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hookviz.vlm.cams import layer_maps, recorded  # noqa: E402
from hookviz.vlm.conversation import answer_conversation  # noqa: E402
from hookviz.vlm.scoring import token_scores  # noqa: E402
from hookviz.vlm.targets import choose_targets  # noqa: E402
from tests.vlm_models import GRID, save_llava  # noqa: E402

LAYER = "model.vision_tower.encoder.layers.1"
ANSWER = "a black cat sits on a red mat and"


def _cpu() -> float:
    return time.process_time()


def _naive(model, talk, targets) -> None:
    """One forward and one backward pass per token: what a per-token loop costs."""
    module = model.get_submodule(LAYER)
    for target in targets:
        with recorded(module) as outputs:
            scores = token_scores(model, talk)[0]
        torch.autograd.grad(scores[list(target.tokens)].sum(), outputs[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=7)
    repeats = parser.parse_args().repeats
    import transformers

    torch.set_num_threads(1)
    folder = Path(tempfile.mkdtemp())
    save_llava(folder)
    model = transformers.LlavaForConditionalGeneration.from_pretrained(folder).eval()
    processor = transformers.AutoProcessor.from_pretrained(folder)
    photo = Image.open(Path(__file__).resolve().parent.parent / "sample_images" / "cat.png").convert("RGB")
    talk = answer_conversation(model, processor, photo, "describe the photo .", ANSWER)
    print(
        f"tiny LLaVA, {talk.inputs['input_ids'].shape[1]} tokens in all, 1 thread; median CPU s of {repeats} alternating repeats"
    )
    print(f"{'tokens':>6} {'one forward + T backward':>25} {'T forward + T backward':>23} {'ratio':>6}")
    for count in (1, 4, 8):
        targets = choose_targets(talk, processor.tokenizer, tokens=",".join(map(str, range(count))))
        ours, naive = [], []
        for _ in range(repeats):
            start = _cpu()
            layer_maps(model, talk, targets, LAYER, [(GRID, GRID)], ["gradcam"])
            ours.append(_cpu() - start)
            start = _cpu()
            _naive(model, talk, targets)
            naive.append(_cpu() - start)
        a, b = statistics.median(ours), statistics.median(naive)
        print(f"{count:>6} {a:>25.4f} {b:>23.4f} {b / a:>6.2f}")


if __name__ == "__main__":
    main()
