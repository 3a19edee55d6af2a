"""Tiny random-weight vision-language models of the families beside LLaVA (Qwen2-VL, PaliGemma,
Idefics3 and SmolVLM), each built from configs with seeded weights and saved with its processor
(SmolVLM with Idefics3's, which makes the same inputs: SmolVLM's own needs num2words)
(a word-level tokenizer written here, the family's image token, a chat template where the real
processor has one), so that ``hf:FOLDER`` and ``from_pretrained`` read them as they read the real
ones. Each loads in well under a second on a CPU.

The photos these processors take are small (``PHOTO``: 24 x 48 pixels):

- Qwen2-VL: 4-pixel patches, 2 x 2 merged, so the processor's ``image_grid_thw`` is (1, 6, 12) and
  the language model sees 3 x 6 image tokens;
- PaliGemma: SigLIP at 16 x 16 pixels with 4-pixel patches, 4 x 4 image tokens;
- Idefics3 / SmolVLM: 16-pixel tiles of 4-pixel patches, pixel-shuffled 2 x 2, so the photo (scaled to
  32 x 48) is 2 x 3 tiles of 2 x 2 tokens, and a global tile of the whole photo after them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

#: The photo's (height, width) the tests feed these models.
PHOTO = (24, 48)
WORDS = (
    "a the photo image picture describe what is in on of and cat dog black white red sky grass sits mat "
    "user assistant system you are helpful . , ? : answer caption en"
).split()
#: The text sizes every family's language model shares.
TEXT = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1}
QWEN2_VL_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'text' %}{{ content['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
IDEFICS3_TEMPLATE = (
    "<|im_start|>{% for message in messages %}{{ message['role'] | capitalize }}"
    "{% if message['content'][0]['type'] == 'image' %}{{ ':' }}{% else %}{{ ': ' }}{% endif %}"
    "{% for line in message['content'] %}{% if line['type'] == 'text' %}{{ line['text'] }}"
    "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}<end_of_utterance>\n"
    "{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)


def photo(seed: int = 0):
    """A seeded random RGB photo of ``PHOTO``'s size (PIL)."""
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (*PHOTO, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


def word_tokenizer(specials: list[str], **kwargs):
    """A word-level fast tokenizer over ``WORDS`` and ``specials`` (each one token, never split),
    with ``<unk>``, ``<pad>``, ``<bos>``, ``<eos>`` and the line break first."""
    import tokenizers
    import transformers

    base = ["<unk>", "<pad>", "<bos>", "<eos>", "\n"]
    vocab = {word: n for n, word in enumerate(dict.fromkeys(base + specials + WORDS))}
    model = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    model.normalizer = tokenizers.normalizers.Lowercase()
    split = tokenizers.pre_tokenizers.Split
    rules = [(r"\n", "isolated"), (r"[ \t]+", "removed"), (r"[^\w\n]", "isolated")]  # a line break is a token
    model.pre_tokenizer = tokenizers.pre_tokenizers.Sequence([split(tokenizers.Regex(p), how) for p, how in rules])
    model.add_special_tokens([tokenizers.AddedToken(s, special=True, normalized=False) for s in base + specials])
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=model, unk_token="<unk>", pad_token="<pad>", bos_token="<bos>", eos_token="<eos>", **kwargs
    )


def _seeded(build, seed: int):
    import torch

    torch.manual_seed(seed)
    return build().eval()


def _save(folder: Path, model, processor) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


def qwen2_vl(folder: Path, seed: int = 0) -> Path:
    """A Qwen2-VL (2-block tower of 4-pixel patches merged 2 x 2, 2-layer Qwen2) saved in ``folder``."""
    import transformers as t

    vision = {"depth": 2, "embed_dim": 32, "hidden_size": 32, "num_heads": 2, "patch_size": 4, "spatial_merge_size": 2}
    return _qwen(folder, seed, vision, (t.Qwen2VLConfig, t.Qwen2VLProcessor, t.Qwen2VLForConditionalGeneration))


def qwen2_5_vl(folder: Path, seed: int = 0) -> Path:
    """A Qwen2.5-VL as ``qwen2_vl``'s, its tower's first block attending within windows of 2 x 2 merge
    blocks (16 pixels), so that the tower's tokens run window by window."""
    import transformers as t

    vision = {"depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "patch_size": 4, "spatial_merge_size": 2}
    vision |= {"out_hidden_size": 32, "window_size": 16, "fullatt_block_indexes": [1]}
    return _qwen(folder, seed, vision, (t.Qwen2_5_VLConfig, t.Qwen2_5_VLProcessor, t.Qwen2_5_VLForConditionalGeneration))


def _qwen(folder: Path, seed: int, vision: dict, classes: tuple) -> Path:
    """A Qwen2-VL or Qwen2.5-VL (``classes``: its config, processor and model classes) of ``vision``'s
    tower and a 2-layer Qwen2, with Qwen2-VL's image processor, saved in ``folder``."""
    import transformers

    tokenizer = word_tokenizer(
        ["<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
    )
    ids = tokenizer.convert_tokens_to_ids
    text = {**TEXT, "vocab_size": len(tokenizer), "bos_token_id": ids("<bos>"), "eos_token_id": ids("<|im_end|>")}
    text |= {"pad_token_id": ids("<pad>"), "rope_parameters": {"rope_type": "default", "mrope_section": [2, 3, 3]}}
    config_class, processor_class, model_class = classes
    config = config_class(
        vision_config=vision,
        text_config=text,
        image_token_id=ids("<|image_pad|>"),
        video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"),
        vision_end_token_id=ids("<|vision_end|>"),
    )
    images = transformers.Qwen2VLImageProcessor(patch_size=4, merge_size=2, min_pixels=8 * 8, max_pixels=64 * 64)
    videos = transformers.Qwen2VLVideoProcessor(patch_size=4, merge_size=2)
    processor = processor_class(images, tokenizer, videos, chat_template=QWEN2_VL_TEMPLATE)
    return _save(folder, _seeded(lambda: model_class(config), seed), processor)


def paligemma(folder: Path, seed: int = 0) -> Path:
    """A PaliGemma (2-layer SigLIP at 16 x 16 pixels, 2-layer Gemma) saved in ``folder``; no chat template."""
    import transformers

    tokenizer = word_tokenizer(["<image>"])
    vision = {"model_type": "siglip_vision_model", "image_size": 16, "patch_size": 4, "hidden_size": 32, "vision_use_head": False}
    vision |= {"intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2}
    text = {**TEXT, "model_type": "gemma", "head_dim": 16, "vocab_size": len(tokenizer)}
    config = transformers.PaliGemmaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
        vocab_size=len(tokenizer),
        projection_dim=32,
        hidden_size=32,
    )
    images = transformers.SiglipImageProcessor(size={"height": 16, "width": 16})
    images.image_seq_length = 16
    processor = transformers.PaliGemmaProcessor(images, tokenizer)
    return _save(folder, _seeded(lambda: transformers.PaliGemmaForConditionalGeneration(config), seed), processor)


def idefics3(folder: Path, seed: int = 0, smolvlm: bool = False) -> Path:
    """An Idefics3 (or, with ``smolvlm``, a SmolVLM: the same model under its own classes) of a
    2-layer tower over 16-pixel tiles and a 2-layer Llama, saved in ``folder``."""
    import transformers

    grid = [f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)]
    tokenizer = word_tokenizer(
        ["<|im_start|>", "<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>", *grid]
    )
    vision = {"image_size": 16, "patch_size": 4, "hidden_size": 32, "intermediate_size": 64}
    vision |= {"num_hidden_layers": 2, "num_attention_heads": 2}
    text = {**TEXT, "model_type": "llama", "vocab_size": len(tokenizer), "pad_token_id": tokenizer.pad_token_id}
    kind = "SmolVLM" if smolvlm else "Idefics3"
    config = getattr(transformers, f"{kind}Config")(
        vision_config=vision, text_config=text, image_token_id=tokenizer.convert_tokens_to_ids("<image>"), scale_factor=2
    )
    images = transformers.Idefics3ImageProcessor(
        size={"longest_edge": 48}, max_image_size={"longest_edge": 16}, do_image_splitting=True
    )
    # SmolVLM's own processor needs num2words; Idefics3's makes the same inputs
    processor = transformers.Idefics3Processor(images, tokenizer, image_seq_len=4, chat_template=IDEFICS3_TEMPLATE)
    model = _seeded(lambda: getattr(transformers, f"{kind}ForConditionalGeneration")(config), seed)
    return _save(folder, model, processor)


BUILDERS = {"qwen2_vl": qwen2_vl, "qwen2_5_vl": qwen2_5_vl, "paligemma": paligemma, "idefics3": idefics3}


def without_image_token(processor):
    """``processor`` (of a family here) remade over a tokenizer without its image token: Qwen2-VL's
    then reads its image pad as ``<unk>``; PaliGemma's and Idefics3's add an ``<image>`` of their own,
    a token the model reads as a word."""
    image = str(processor.image_token)
    specials = [t for t in processor.tokenizer.all_special_tokens if t != image and t not in ("<unk>", "<pad>", "<bos>", "<eos>")]
    tokenizer = word_tokenizer(specials)
    kind = type(processor)
    if kind.__name__.startswith(("Qwen2VL", "Qwen2_5_VL")):
        return kind(processor.image_processor, tokenizer, processor.video_processor, chat_template=processor.chat_template)
    if "PaliGemma" in kind.__name__:
        return kind(processor.image_processor, tokenizer)
    return kind(
        processor.image_processor, tokenizer, image_seq_len=processor.image_seq_len, chat_template=processor.chat_template
    )
