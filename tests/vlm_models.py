"""A tiny LLaVA built from configs for the vision-language tests: a 2-layer CLIP vision tower
(32x32 photos, 8-pixel patches: a 4x4 grid), a 2-layer Llama, a word-level tokenizer built
here from a hand-written vocabulary, and a saved processor with a chat template; seeded
random weights, saved with save_pretrained. Loads in well under a second."""

from __future__ import annotations

from pathlib import Path

import torch

WORDS = (
    "<pad> <unk> <s> </s> <image> USER: ASSISTANT: a the cat dog photo describe . black white is on sits mat red "
    "blue what colour it in of and small big grey tabby"
).split()
IMAGE_TOKEN = 4
SIZE, PATCH = 32, 8
GRID = SIZE // PATCH
CONTEXT = 64
TEMPLATE = (
    "{% for message in messages %}{{ message['role'].upper() }}: {% for c in message['content'] %}"
    "{% if c['type'] == 'image' %}<image> {% else %}{{ c['text'] }} {% endif %}{% endfor %}{% endfor %}"
    "{% if add_generation_prompt %}ASSISTANT:{% endif %}"
)


def tokenizer(image_token: bool = True):
    """A word-level fast tokenizer over ``WORDS`` (white space splits, unknown words are ``<unk>``)."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    words = WORDS if image_token else tuple(w if w != "<image>" else "<picture>" for w in WORDS)
    core = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    core.decoder = decoders.WordPiece(prefix="##")  # words joined by spaces
    special = {"image_token": "<image>"} if image_token else {}
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        extra_special_tokens=special,
    )


def config():
    import transformers

    vision = transformers.CLIPVisionConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, image_size=SIZE, patch_size=PATCH
    )
    text = transformers.LlamaConfig(
        vocab_size=len(WORDS),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=CONTEXT,
        bos_token_id=2,
        eos_token_id=3,
        pad_token_id=0,
    )
    return transformers.LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=IMAGE_TOKEN,
        vision_feature_layer=-1,
        vision_feature_select_strategy="default",
    )


def tiny_llava(seed: int = 0):
    """The model, in eval mode, float32, seeded."""
    import transformers

    torch.manual_seed(seed)
    model = transformers.LlavaForConditionalGeneration(config()).eval()
    model.generation_config.eos_token_id = None  # a random model: generate the tokens asked for
    return model


def processor(image_token: bool = True, chat_template: bool = True):
    import transformers

    images = transformers.CLIPImageProcessor(size={"shortest_edge": SIZE}, crop_size={"height": SIZE, "width": SIZE})
    return transformers.LlavaProcessor(
        image_processor=images,
        tokenizer=tokenizer(image_token),
        patch_size=PATCH,
        vision_feature_select_strategy="default",
        chat_template=TEMPLATE if chat_template else None,
        num_additional_image_tokens=1,
    )


def load_llava(folder: Path):
    """(model, processor) loaded back from a folder ``save_llava`` filled, the model in eval mode."""
    import transformers

    model = transformers.LlavaForConditionalGeneration.from_pretrained(folder).eval()
    return model, transformers.AutoProcessor.from_pretrained(folder)


def save_llava(folder: Path, seed: int = 0, image_token: bool = True, chat_template: bool = True):
    """The tiny LLaVA and its processor saved into ``folder``; returns (model, processor)."""
    model, made = tiny_llava(seed), processor(image_token, chat_template)
    model.save_pretrained(folder)
    made.save_pretrained(folder)
    return model, made
