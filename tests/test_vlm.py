"""Vision-language models on the tiny LLaVA (tests/vlm_models.py): the conversation, the
scores of its answer tokens, and where the family says the image tokens sit."""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from .conftest import SAMPLES
from .vlm_models import GRID, IMAGE_TOKEN, save_llava

transformers = pytest.importorskip("transformers")

PROMPT = "describe the photo ."


@pytest.fixture(scope="module")
def llava(tmp_path_factory):
    """(folder, model, processor) of the tiny LLaVA, loaded back from its folder."""
    folder = tmp_path_factory.mktemp("llava")
    save_llava(folder)
    model = transformers.LlavaForConditionalGeneration.from_pretrained(folder).eval()
    return folder, model, transformers.AutoProcessor.from_pretrained(folder)


@pytest.fixture(scope="module")
def photo():
    return Image.open(SAMPLES / "cat.png").convert("RGB")


def test_one_forward_pass_scores_every_answer_token_as_the_full_logits_do(llava, photo):
    from hookviz.vlm.conversation import answer_conversation
    from hookviz.vlm.scoring import token_scores

    _, model, processor = llava
    talk = answer_conversation(model, processor, photo, PROMPT, "a black cat")
    assert talk.tokens == ("a", "black", "cat") and talk.text == "a black cat"
    with torch.no_grad():
        full = model(**talk.inputs).logits[0]
        scores = token_scores(model, talk, objective="logprob")
        logits = token_scores(model, talk, torch.cat([talk.inputs["pixel_values"]] * 2), objective="logit")
    expected = torch.log_softmax(full, -1)[talk.answer_positions, talk.answer_ids]
    torch.testing.assert_close(scores[0], expected)
    torch.testing.assert_close(logits, full[talk.answer_positions, talk.answer_ids].expand(2, -1))


def test_llavas_image_tokens_are_where_the_processor_put_them_row_by_row(llava, photo):
    from hookviz.vlm.conversation import model_inputs
    from hookviz.vlm.families.base import family_of

    _, model, processor = llava
    inputs = model_inputs(model, processor, photo, PROMPT)
    family = family_of(model)
    (tokens,) = family.image_tokens(model, inputs)
    assert family.name == "llava" and tokens.grid == (GRID, GRID) == family.vision_grid(model, inputs)
    assert torch.equal(tokens.positions, torch.nonzero(inputs["input_ids"][0] == IMAGE_TOKEN).flatten())
    assert family.default_layers(model) == {
        "vision": "model.vision_tower.encoder.layers.1",
        "projector": "model.multi_modal_projector",
    }
    assert family.language_layers(model) == [f"model.language_model.layers.{i}" for i in range(2)]
