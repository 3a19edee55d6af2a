"""Each vision-language family's image tokens and grids sit over the right place in the photo.

On the tiny models of ``tests/vlm_families.py`` with the tower's attention cut (its output
projections zeroed, so each patch's features depend on that patch's pixels alone), changing the
pixels under one cell of a family's grid changes the language model's input only at the image
token the family puts over that cell, and the tower's output only at the patch ``vision_order``
puts there. A wrong order (columns for rows, Qwen2-VL's merge blocks read as rows, Idefics3's
tiles one after the other) moves the change elsewhere and fails."""

from __future__ import annotations

import pytest
import torch

from tests import vlm_families

#: family -> (builder's keywords, photo (height, width) the processor keeps as it is, the tower).
CASES = {
    "qwen2_vl": ({}, (24, 48), "model.visual"),
    "qwen2_5_vl": ({}, (24, 48), "model.visual"),
    "paligemma": ({}, (16, 16), "model.vision_tower"),
    "idefics3": ({"smolvlm": True}, (32, 48), "model.vision_model"),
}

#: A model whose family file is another's (Qwen2.5-VL's is Qwen2-VL's, windows added).
FAMILY_OF = {"qwen2_5_vl": "qwen2_vl"}


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict:
    """Each family's tiny model and processor, saved once for the module's tests."""
    return {
        name: vlm_families.BUILDERS[name](tmp_path_factory.mktemp(name), **keywords) for name, (keywords, _, _) in CASES.items()
    }


def _load(name: str, folders: dict):
    import transformers

    _, size, tower = CASES[name]
    folder = folders[name]
    model = transformers.AutoModelForImageTextToText.from_pretrained(folder).eval()
    processor = transformers.AutoProcessor.from_pretrained(folder)
    with torch.no_grad():  # each patch's features from its own pixels only
        for part, module in model.get_submodule(tower).named_modules():
            if part.endswith(("attn.proj", "self_attn.out_proj")):
                module.weight.zero_()
                module.bias.zero_()
    return model, processor, size


def _inputs(processor, pixels):
    from PIL import Image

    if processor.chat_template:
        chat = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Describe the photo."}]}]
        text = processor.apply_chat_template(chat, add_generation_prompt=True)
    else:
        text = "<image>describe the photo"
    return dict(processor(text=text, images=Image.fromarray(pixels), return_tensors="pt"))


def _seen(model, layer: str, inputs, output: bool) -> torch.Tensor:
    """``layer``'s first input (the decoder layer's hidden states) or output, tokens flattened."""
    seen = []

    def keep(_module, args, kwargs, result=None):
        value = (result[0] if isinstance(result, tuple) else result) if output else (args[0] if args else kwargs["hidden_states"])
        seen.append(value.detach().reshape(-1, value.shape[-1]))

    module = model.get_submodule(layer)
    hook = (
        module.register_forward_hook(keep, with_kwargs=True)
        if output
        else module.register_forward_pre_hook(keep, with_kwargs=True)
    )
    with torch.no_grad(), hook:
        model(**inputs)
    return seen[0]


def _changed(before: torch.Tensor, after: torch.Tensor) -> set[int]:
    return set(torch.nonzero((before - after).abs().amax(-1) > 1e-5).flatten().tolist())


def _photos(size, grid, cell):
    """A seeded photo, and the same with the pixels under ``cell`` of ``grid`` over the photo changed."""
    import numpy as np

    pixels = np.random.default_rng(0).integers(0, 256, (*size, 3), dtype=np.uint8)
    changed = pixels.copy()
    (height, width), (rows, cols) = size, grid
    row, col = cell
    under = (slice(row * height // rows, (row + 1) * height // rows), slice(col * width // cols, (col + 1) * width // cols))
    changed[under] = 255 - changed[under]
    return pixels, changed


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_change_under_one_cell_reaches_only_the_token_over_it(name, folders):
    from hookviz.vlm.families.base import family_of

    model, processor, size = _load(name, folders)
    family = family_of(model)
    assert family.name == FAMILY_OF.get(name, name)
    first = _inputs(processor, _photos(size, (1, 1), (0, 0))[0])
    tokens = family.image_tokens(model, first)[0]
    image_token = int(getattr(model.config, "image_token_id", None) or model.config.image_token_index)
    everything = set(torch.nonzero(first["input_ids"][0] == image_token).flatten().tolist())
    other_images = everything - set(tokens.positions.tolist())  # Idefics3's global tile sees the whole photo
    decoder = family.language_layers(model)[0]
    for cell in [(1, 2), (tokens.grid[0] - 1, 0)]:
        before, after = (_inputs(processor, pixels) for pixels in _photos(size, tokens.grid, cell))
        changed = _changed(_seen(model, decoder, before, False), _seen(model, decoder, after, False)) - other_images
        assert changed == {int(tokens.positions[cell[0] * tokens.grid[1] + cell[1]])}, (cell, changed)


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_change_under_one_patch_reaches_only_the_towers_token_there(name, folders):
    from hookviz.vlm.families.base import family_of

    model, processor, size = _load(name, folders)
    family = family_of(model)
    first = _inputs(processor, _photos(size, (1, 1), (0, 0))[0])
    grid, order = family.vision_grid(model, first), family.vision_order(model, first)
    layers = family.default_layers(model)
    assert {type(model.get_submodule(layers[key])).__name__ for key in ("vision", "projector")} and family.language_layers(model)
    assert sorted(order.tolist()) == list(range(grid[0] * grid[1]))
    for cell in [(1, 2), (grid[0] - 1, grid[1] - 3)]:
        before, after = (_inputs(processor, pixels) for pixels in _photos(size, grid, cell))
        changed = _changed(_seen(model, layers["vision"], before, True), _seen(model, layers["vision"], after, True))
        assert changed - set(range(grid[0] * grid[1], 10**6)) == {int(order[cell[0] * grid[1] + cell[1]])}, (cell, changed)


def test_qwen2_5_vls_tower_and_merger_run_window_by_window_and_are_laid_back_row_by_row(tmp_path):
    """Qwen2.5-VL's tower reads its merge blocks window by window through its blocks and its merger:
    a change under one patch reaches the tower's token and the merger's token ``vision_order`` and
    ``projector_order`` name there (the cell chosen lies elsewhere in the window order than row by row)."""
    from hookviz.vlm.families.base import family_of

    model, processor, size = _load("qwen2_vl", {"qwen2_vl": vlm_families.qwen2_5_vl(tmp_path / "qwen2_5_vl")})
    family = family_of(model)
    assert type(model).__name__ == "Qwen2_5_VLForConditionalGeneration" and family.name == "qwen2_vl"
    first = _inputs(processor, _photos(size, (1, 1), (0, 0))[0])
    (rows, cols), layers = family.vision_grid(model, first), family.default_layers(model)
    towers, merged = family.vision_order(model, first), family.projector_order(model, first)
    for row, col in [(0, 4)]:
        block = (row // 2) * (cols // 2) + col // 2
        assert int(merged[block]) != block  # elsewhere than row by row
        before, after = (_inputs(processor, pixels) for pixels in _photos(size, (rows, cols), (row, col)))
        for layer, order, cell in ((layers["vision"], towers, row * cols + col), (layers["projector"], merged, block)):
            changed = _changed(_seen(model, layer, before, True), _seen(model, layer, after, True))
            assert changed == {int(order[cell])}, (layer, (row, col), changed)


def test_a_tower_layers_map_is_laid_out_by_the_familys_vision_order(folders):
    """Qwen2-VL's tower runs merge block by merge block: as_grid puts each patch's features on
    its own cell (before, they were read row by row and scrambled the map)."""
    from hookviz.vlm.cams import as_grid
    from hookviz.vlm.families.base import family_of

    model, processor, size = _load("qwen2_vl", folders)
    inputs = _inputs(processor, _photos(size, (1, 1), (0, 0))[0])
    family = family_of(model)
    rows, cols = family.vision_grid(model, inputs)
    order = family.vision_order(model, inputs)
    cells = torch.arange(rows * cols, dtype=torch.float32)
    tower = torch.empty(rows * cols, 1)
    tower[order, 0] = cells  # the tower's token at index order[k] sits over cell k
    laid = as_grid(tower, [(rows, cols)], "model.visual.blocks.1", [order])
    assert torch.equal(laid.reshape(-1), cells)


@pytest.fixture(scope="module")
def families(folders):
    """Each family's tiny model (float32, its tower whole) and processor, loaded back once."""
    import transformers

    return {
        name: (
            transformers.AutoModelForImageTextToText.from_pretrained(folder).eval(),
            transformers.AutoProcessor.from_pretrained(folder),
        )
        for name, folder in folders.items()
    }


@pytest.mark.parametrize("name", sorted(CASES))
def test_bfloat16_gives_each_familys_float32_answer_and_maps_close_to_its(name, families):
    import copy

    from hookviz.vlm.explain import VlmRequest, explain_photo

    model, processor = families[name]
    request = VlmRequest("describe the photo", answer="a black cat", methods=("gradcam",), layers=("vision", "projector"))
    full = explain_photo(model, processor, vlm_families.photo(), request)
    half = explain_photo(copy.deepcopy(model).to(torch.bfloat16), processor, vlm_families.photo(), request)
    assert half.conversation.text == full.conversation.text == "a black cat"
    for ours, theirs in zip(full.maps, half.maps, strict=True):
        a, b = ours.maps.flatten(), theirs.maps.flatten().float()
        assert torch.isfinite(b).all() and a.std() > 0 and torch.corrcoef(torch.stack([a, b]))[0, 1] > 0.9, ours.layer


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_processor_without_the_models_image_token_is_refused_in_one_line(name, families):
    """Qwen2-VL's reads its image pad as ``<unk>``; PaliGemma's and Idefics3's add an ``<image>`` of
    their own, which the model read as a word (an IndexError, a ValueError from transformers before)."""
    from hookviz.errors import UnknownModelError
    from hookviz.vlm.explain import VlmRequest, explain_photo

    model, processor = families[name]
    with pytest.raises(UnknownModelError) as refused:
        explain_photo(model, vlm_families.without_image_token(processor), vlm_families.photo(), VlmRequest("describe"))
    message = str(refused.value)
    assert f"the processor {type(processor).__name__} has no image token" in message and "\n" not in message
    assert "save the model's own processor" in message


def test_a_photo_qwen2_vls_processor_cannot_take_is_refused_in_one_line(families):
    """Qwen2-VL's processor takes no photo of an aspect ratio past 200; PaliGemma's and Idefics3's
    scale any photo to their tiles, so no photo is refused there."""
    from PIL import Image

    from hookviz.errors import ImageError
    from hookviz.vlm.explain import VlmRequest, explain_photo

    model, processor = families["qwen2_vl"]
    with pytest.raises(ImageError, match=r"^the processor Qwen2VLProcessor cannot take this photo \(absolute aspect ratio"):
        explain_photo(model, processor, Image.new("RGB", (300, 1)), VlmRequest("describe"))


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_pictures_show_the_photo_the_model_saw(name, families):
    """Qwen2-VL's processor gives patches, Idefics3's tiles: the pictures showed a grey panel of
    the patches' shape (Qwen2-VL) or the first tile alone (Idefics3) under maps of the whole photo."""
    import numpy as np
    from PIL import Image

    from hookviz.vlm.explain import VlmRequest, explain_photo

    from .conftest import SAMPLES

    model, processor = families[name]
    photo = Image.open(SAMPLES / "cat.png").convert("RGB").resize((72, 48))  # 2:3, as the tiny models take it
    seen = explain_photo(model, processor, photo, VlmRequest("describe the photo", answer="a cat", methods=())).photo
    if name != "paligemma":  # SigLIP squashes every photo to its square
        assert seen.shape[1] / seen.shape[0] == pytest.approx(1.5, abs=0.1), seen.shape
    expected = np.asarray(photo.resize(seen.shape[1::-1], Image.BICUBIC), dtype=np.float32) / 255
    assert np.abs(seen - expected).mean() < 0.03


@pytest.mark.parametrize("name", sorted(CASES))
def test_integrated_gradients_equal_captums_on_each_familys_pixel_values(name, families):
    """Each point of the path is a photo, Idefics3's tiles or Qwen2-VL's patches, one after the other
    along the first axis, as captum expands them (the path failed to broadcast on Qwen2-VL's patches,
    and its map on Idefics3's tiles)."""
    captum = pytest.importorskip("captum.attr")
    from hookviz.vlm.cams import integrated_gradients
    from hookviz.vlm.conversation import answer_conversation
    from hookviz.vlm.explain import VlmRequest, explain_photo, laid_out
    from hookviz.vlm.families.base import family_of
    from hookviz.vlm.scoring import token_scores
    from hookviz.vlm.targets import Target

    model, processor = families[name]
    talk = answer_conversation(model, processor, vlm_families.photo(), "describe the photo", "a cat")
    ours = integrated_gradients(model, talk, [Target((1,), "cat")], steps=4, objective="logprob")[0]

    def forward(pixels):
        return token_scores(model, talk, pixels, "logprob")[:, 1]

    theirs = captum.IntegratedGradients(forward).attribute(talk.inputs["pixel_values"], n_steps=4)
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-6)
    if (
        name != "idefics3"
    ):  # laid on the photo, every value is kept (Qwen2-VL's two temporal copies summed); Idefics3's global tile is not on it
        torch.testing.assert_close(laid_out(family_of(model), model, talk.inputs, ours, summed=True).sum(), ours.sum())
    request = VlmRequest("describe the photo", answer="a cat", tokens="1", methods=("integrated-gradients",), steps=2)
    explained = explain_photo(model, processor, vlm_families.photo(), request)
    assert explained.maps[0].maps.shape[1:] == explained.photo.shape[:2] and explained.maps[0].maps.abs().sum() > 0
