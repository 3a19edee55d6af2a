"""Perturbation of a vision-language model's answer against captum's, in one process, taking turns:
hookviz's feature ablation (``hookviz.vlm.perturbation.feature_ablation``: one teacher-forced pass
per mask scores every answer token, the masks batched within the memory budget) against captum
0.9's ``LLMAttribution(FeatureAblation(model))`` over an ``ImageMaskInput`` with the same
superpixels, explaining the same 8-token answer:

- captum token by token (``forward_in_tokens=True``, its default way, without the cache, which
  on transformers 5 drops the photo after the first token): a pass per mask and per token;
- captum by sequence (``forward_in_tokens=False``): a pass per mask, one mask at a time.

Both make the changed photos with the same processor; the drops are checked equal before timing.
The model is a LLaVA with random weights built from configs (a CLIP tower of ``--size`` pixels in
14-pixel patches, a Llama of ``--hidden`` features, 4 layers each), the demo cat, ``--superpixels``
SLIC segments. Medians of the process's CPU time (wall in brackets); captum / hookviz above 1:
hookviz is faster. Asserts nothing but the equality.

    OMP_NUM_THREADS=1 python bench/vlm_perturbation.py [--repeats 5] [--size 112] [--hidden 256] [--superpixels 16]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch
from PIL import Image

PHOTO = "sample_images/cat.png"
PROMPT = "describe the photo ."
ANSWER = "a black cat sits on the red mat"  # 8 tokens


def _clock(function) -> tuple[float, float, object]:
    wall, cpu = time.perf_counter(), time.process_time()
    result = function()
    return time.process_time() - cpu, time.perf_counter() - wall, result


def _llava(size: int, hidden: int):
    """A random-weight LLaVA of a ``size``-pixel CLIP tower and a ``hidden``-wide Llama, loaded back
    from a folder with its processor (the tiny test LLaVA's tokenizer and chat template)."""
    import transformers

    from tests import vlm_models

    width = {"hidden_size": hidden, "intermediate_size": 2 * hidden, "num_hidden_layers": 4, "num_attention_heads": 4}
    config = vlm_models.config()
    config.vision_config = transformers.CLIPVisionConfig(**width, image_size=size, patch_size=14)
    config.text_config = transformers.LlamaConfig(
        **width, vocab_size=len(vlm_models.WORDS), max_position_embeddings=512, bos_token_id=2, eos_token_id=3, pad_token_id=0
    )
    torch.manual_seed(0)
    model = transformers.LlavaForConditionalGeneration(config).eval()
    images = transformers.CLIPImageProcessor(size={"shortest_edge": size}, crop_size={"height": size, "width": size})
    processor = transformers.LlavaProcessor(
        image_processor=images,
        tokenizer=vlm_models.tokenizer(),
        patch_size=14,
        vision_feature_select_strategy="default",
        chat_template=vlm_models.TEMPLATE,
        num_additional_image_tokens=1,
    )
    folder = tempfile.mkdtemp()
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    loaded = transformers.LlavaForConditionalGeneration.from_pretrained(folder).eval()
    return loaded, transformers.AutoProcessor.from_pretrained(folder)


def main() -> None:
    from captum.attr import FeatureAblation, ImageMaskInput, LLMAttribution

    from hookviz.vlm.conversation import answer_conversation, model_inputs
    from hookviz.vlm.perturbation import feature_ablation, superpixels

    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--size", type=int, default=112)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--superpixels", type=int, default=16)
    args = parser.parse_args()
    model, processor = _llava(args.size, args.hidden)
    photo = Image.open(PHOTO).convert("RGB").resize((args.size, args.size))
    talk = answer_conversation(model, processor, photo, PROMPT, ANSWER)
    segments = superpixels(photo, args.superpixels)
    explainer = LLMAttribution(FeatureAblation(model), tokenizer=processor.tokenizer)
    image = ImageMaskInput(image=photo, mask=segments, processor_fn=lambda shown: model_inputs(model, processor, shown, PROMPT))

    runs = {
        "hookviz": lambda: feature_ablation(model, processor, talk, photo, segments).drops,
        "captum, token by token": lambda: (
            explainer.attribute(image, target=talk.answer_ids, forward_in_tokens=True, use_cached_outputs=False).token_attr
        ),
        "captum, by sequence": lambda: explainer.attribute(image, target=talk.answer_ids, forward_in_tokens=False).token_attr,
    }
    first = {name: run() for name, run in runs.items()}  # first-call costs out of the medians
    for name, drops in first.items():
        torch.testing.assert_close(drops, first["hookviz"], rtol=1e-4, atol=1e-4, msg=lambda m, name=name: f"{name}: {m}")
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
    for _ in range(args.repeats):  # in turn, so that the machine's drift falls on all
        for name, run in runs.items():
            times[name].append(_clock(run)[:2])
    tokens, masks = len(talk.answer_ids), len(segments.unique())
    print(
        f"LLaVA, random weights: CLIP {args.size} px ({(args.size // 14) ** 2} image tokens), Llama {args.hidden} wide, 4 layers each; "
        f"{tokens} answer tokens, {masks} superpixels; {args.repeats} turns, torch threads {torch.get_num_threads()}"
    )
    ours = statistics.median(cpu for cpu, _ in times["hookviz"])
    for name, measured in times.items():
        cpu, wall = statistics.median(c for c, _ in measured), statistics.median(w for _, w in measured)
        print(f"    {name:24} {1000 * cpu:8.0f} ms ({1000 * wall:.0f} wall)   / hookviz: {cpu / ours:.2f}")


if __name__ == "__main__":
    main()
