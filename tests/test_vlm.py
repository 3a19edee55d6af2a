"""Vision-language models on the tiny LLaVA (tests/vlm_models.py): the conversation, the
scores of its answer tokens, and where the family says the image tokens sit."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image

import hookviz

from .conftest import SAMPLES
from .vlm_models import GRID, IMAGE_TOKEN, load_llava, save_llava

transformers = pytest.importorskip("transformers")

PROMPT = "describe the photo ."


@pytest.fixture(scope="module")
def llava(llava_folder):
    """(folder, model, processor) of the tiny LLaVA, loaded back from its folder."""
    return (llava_folder, *load_llava(llava_folder))


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


def _hand_gradcam(model, inputs, answer_ids, layer: str, tokens) -> torch.Tensor:
    """Grad-CAM by plain hooks: the whole sequence's logits (teacher forcing), the token's logit at
    the position before it, the layer's patch tokens (class token dropped) on the 4x4 grid."""
    kept = []
    handle = model.get_submodule(layer).register_forward_hook(lambda m, i, o: kept.append(o[0] if isinstance(o, tuple) else o))
    try:
        logits = model(**inputs).logits[0]
    finally:
        handle.remove()
    start = inputs["input_ids"].shape[1] - len(answer_ids)
    score = sum(logits[start - 1 + k, answer_ids[k]] for k in tokens)
    (gradient,) = torch.autograd.grad(score, kept[0])
    a, g = kept[0][0, 1:], gradient[0, 1:]  # (16, C)
    cam = torch.relu((a * g.mean(0)).sum(-1))
    return cam.reshape(GRID, GRID).detach(), kept[0], gradient


def test_each_tokens_gradcam_is_the_hand_computed_one_and_its_gradient_the_finite_difference(llava, photo):
    from hookviz.vlm.cams import layer_maps
    from hookviz.vlm.conversation import answer_conversation
    from hookviz.vlm.targets import choose_targets

    _, model, processor = llava
    talk = answer_conversation(model, processor, photo, PROMPT, "a black cat")
    targets = choose_targets(talk, processor.tokenizer, tokens="0,2")
    layer = "model.vision_tower.encoder.layers.0"
    maps, _ = layer_maps(model, talk, targets, layer, [(GRID, GRID)], ["gradcam"])
    prompt_ids = talk.inputs["input_ids"]
    for k, target in enumerate(targets):
        expected, activation, gradient = _hand_gradcam(model, talk.inputs, talk.answer_ids, layer, target.tokens)
        torch.testing.assert_close(maps["gradcam"][k], expected, rtol=1e-4, atol=1e-6)
        assert expected.max() > 0
        # the gradient is the score's own: a step along it changes the score by |g|^2 eps
        direction = gradient / gradient.norm()
        changed = []
        for eps in (1e-2, -1e-2):
            handle = model.get_submodule(layer).register_forward_hook(
                lambda m, i, o, e=eps * direction: (o[0] + e, *o[1:]) if isinstance(o, tuple) else o + e
            )
            try:
                with torch.no_grad():
                    logits = model(**talk.inputs).logits[0]
            finally:
                handle.remove()
            start = prompt_ids.shape[1] - len(talk.answer_ids)
            changed.append(sum(float(logits[start - 1 + t, talk.answer_ids[t]]) for t in target.tokens))
        torch.testing.assert_close((changed[0] - changed[1]) / 2e-2, float(gradient.norm()), rtol=2e-2, atol=1e-5)


def test_a_word_of_several_tokens_is_explained_as_their_sum(llava, photo):
    """``--words tabby`` where a subword tokenizer writes tab ##by: one target of both tokens, whose
    Grad-CAM is the hand-computed one of their logits' sum."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    from hookviz.vlm.explain import VlmRequest, explain_photo

    from .vlm_models import PATCH, WORDS

    _, model, processor = llava
    vocabulary = [{"grey": "tab", "tabby": "##by"}.get(word, word) for word in WORDS]  # the model's ids kept
    core = Tokenizer(models.WordPiece(vocab={w: i for i, w in enumerate(vocabulary)}, unk_token="<unk>"))
    core.pre_tokenizer, core.decoder = pre_tokenizers.WhitespaceSplit(), decoders.WordPiece(prefix="##")
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>",
        extra_special_tokens={"image_token": "<image>"},
    )  # fmt: skip
    subwords = transformers.LlavaProcessor(
        image_processor=processor.image_processor, tokenizer=tokenizer, patch_size=PATCH,
        vision_feature_select_strategy="default", chat_template=processor.chat_template, num_additional_image_tokens=1,
    )  # fmt: skip
    layer = "model.vision_tower.encoder.layers.0"
    request = VlmRequest(PROMPT, answer="a tabby cat", words="tabby", methods=("gradcam",), layers=(layer,))
    result = explain_photo(model, subwords, photo, request)
    talk = result.conversation
    assert talk.text == "a tabby cat" and talk.tokens == ("a", "tab", "##by", "cat")
    assert [(t.tokens, t.label) for t in result.targets] == [((1, 2), "tabby")]
    expected, _, _ = _hand_gradcam(model, talk.inputs, talk.answer_ids, layer, (1, 2))
    torch.testing.assert_close(result.maps[0].maps[0], expected, rtol=1e-4, atol=1e-6)


def test_integrated_gradients_equal_captums_on_the_pixel_values(llava, photo):
    captum = pytest.importorskip("captum.attr")
    from hookviz.vlm.cams import integrated_gradients
    from hookviz.vlm.conversation import answer_conversation
    from hookviz.vlm.scoring import token_scores
    from hookviz.vlm.targets import choose_targets

    _, model, processor = llava
    talk = answer_conversation(model, processor, photo, PROMPT, "a black cat")
    targets = choose_targets(talk, processor.tokenizer, words="black,cat")
    ours = integrated_gradients(model, talk, targets, steps=8, objective="logprob")
    for k, target in enumerate(targets):

        def forward(pixels, tokens=target.tokens):
            return token_scores(model, talk, pixels, "logprob")[:, list(tokens)].sum(-1)

        theirs = captum.IntegratedGradients(forward).attribute(talk.inputs["pixel_values"], n_steps=8)
        torch.testing.assert_close(ours[k], theirs, rtol=1e-4, atol=1e-6)
        assert theirs.abs().sum() > 0


def _run(folder, tmp_path, *args, photo=SAMPLES / "cat.png", prompt=PROMPT):
    from .cli_helpers import hookviz_run

    return hookviz_run(photo, "--prompt", prompt, *args, model=f"hf:{folder}", weights=None, out=tmp_path / "out")


def test_run_writes_the_answer_transformers_generate_writes_and_each_tokens_files(llava, photo, tmp_path):
    import json

    import numpy as np

    folder, model, processor = llava
    result = _run(
        folder, tmp_path, "--max-new-tokens", "4", "--cam", "gradcam,rollout", "--save-tensors", "--objective", "logprob"
    )
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "out" / "cat" / "report.json").read_text())
    text = processor.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": PROMPT}]}], add_generation_prompt=True
    )
    inputs = processor(images=photo, text=text, return_tensors="pt")
    written = model.generate(**inputs, max_new_tokens=4, do_sample=False)[0, inputs["input_ids"].shape[1] :]
    assert report["text"] == processor.decode(written, skip_special_tokens=True)
    assert [t["id"] for t in report["tokens"]] == written.tolist()
    assert report["prompt"] == PROMPT and report["objective"] == "logprob"
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((Path(hookviz.__file__).parent / "schemas" / "vlm_report.schema.json").read_text())
    jsonschema.validate(report, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**report, "answer": "dreamt"}, schema)
    tensors = np.load(tmp_path / "out" / "cat" / "tensors.npz")
    assert "model.vision_tower.encoder.layers.1/gradcam/token3" in tensors and "language/rollout/token0" in tensors
    assert sorted(p.name for p in (tmp_path / "out" / "cat").glob("*.png")) == [
        *(f"token{k}.png" for k in range(4)),
        "tokens.png",
    ]


@pytest.mark.parametrize(
    "case, line",
    [
        ("long prompt", "--prompt: the prompt and the photo make "),
        ("empty answer", "--answer '   ' tokenizes to nothing; give the answer's words"),
        ("no image token", "has no image token, so no photo can enter the prompt"),
        ("unreadable photo", "cat.png: image data is corrupt or truncated"),
        ("no vision tower", "is a language model without a vision tower (LlamaForCausalLM)"),
        ("faithfulness", "--faithfulness: a vision-language model's run does not take it yet; drop it"),
    ],
)
def test_each_bad_input_is_refused_in_one_line(case, line, llava, tmp_path):
    folder, photo, args, prompt = llava[0], SAMPLES / "cat.png", [], PROMPT
    if case == "long prompt":
        prompt = " ".join(["cat"] * 60)
    elif case == "empty answer":
        args = ["--answer", "   "]
    elif case == "no image token":
        folder = tmp_path / "plain"
        save_llava(folder, image_token=False)
    elif case == "unreadable photo":
        photo = tmp_path / "cat.png"
        photo.write_bytes((SAMPLES / "cat.png").read_bytes()[:200])
    elif case == "faithfulness":
        args = ["--faithfulness"]
    elif case == "no vision tower":
        folder = tmp_path / "llama"
        transformers.LlamaForCausalLM(llava[1].config.text_config).save_pretrained(folder)
    result = _run(folder, tmp_path, *args, photo=photo, prompt=prompt)
    assert result.exit_code != 0 and line in result.stderr, result.output
    # a photo that fails is told as a photo run tells it: what runs, its line, then the run's closing two
    assert "Traceback" not in result.output and len(result.stderr.strip().splitlines()) <= (
        4 if case == "unreadable photo" else 2
    )


def test_hookviz_explain_takes_the_same_path_as_the_command(llava, photo):
    from hookviz import explain
    from hookviz.vlm.cams import layer_maps
    from hookviz.vlm.conversation import answer_conversation
    from hookviz.vlm.targets import choose_targets

    folder, model, processor = llava
    result = explain(f"hf:{folder}", SAMPLES / "cat.png", prompts=PROMPT, answer="a black cat", words="cat", cam="layercam")
    talk = answer_conversation(model, processor, photo, PROMPT, "a black cat")
    expected, _ = layer_maps(
        model,
        talk,
        choose_targets(talk, processor.tokenizer, tokens="2"),
        "model.vision_tower.encoder.layers.1",
        [(GRID, GRID)],
        ["layercam"],
    )
    assert result.conversation.text == "a black cat" and result.targets[0].tokens == (2,)
    torch.testing.assert_close(result.maps[0].maps, expected["layercam"])


def test_integrated_gradients_take_one_default_of_steps_in_the_api_and_the_command(llava, photo, tmp_path):
    """``--steps``'s default is ``VlmRequest``'s: ``explain_photo``, ``hookviz.explain`` and ``hookviz run``
    give one map; ``--steps auto``, which a vision-language model does not take, is refused in one line."""
    import numpy as np

    from hookviz import explain
    from hookviz.vlm.explain import VlmRequest, explain_photo

    folder, model, processor = llava
    request = VlmRequest(PROMPT, answer="a cat", tokens="1", methods=("integrated-gradients",))
    direct = explain_photo(model, processor, photo, request).maps[0].maps
    given = dict(prompts=PROMPT, answer="a cat", tokens="1", cam="integrated-gradients")
    torch.testing.assert_close(explain(f"hf:{folder}", SAMPLES / "cat.png", **given).maps[0].maps, direct)
    result = _run(folder, tmp_path, "--answer", "a cat", "--tokens", "1", "--cam", "integrated-gradients", "--save-tensors")
    assert result.exit_code == 0, result.output
    with np.load(tmp_path / "out" / "cat" / "tensors.npz") as saved:
        np.testing.assert_allclose(saved["pixels/integrated-gradients/token1"], direct[0].numpy(), rtol=1e-5, atol=1e-7)

    auto = _run(folder, tmp_path, "--answer", "a cat", "--cam", "integrated-gradients", "--steps", "auto")
    assert auto.exit_code == 2 and auto.stderr.strip().splitlines() == [
        "hookviz: error: --steps auto: a vision-language model's integrated gradients take a number of steps "
        "(32 by default), not auto"
    ]


def test_gradcam_of_every_token_costs_one_forward_pass_and_a_backward_pass_per_token(llava, photo, monkeypatch):
    """The probabilities report.json keeps come from the CAMs' own forward pass (and equal a forward
    pass's of their own): one forward pass of the model and K backward passes for K tokens, whatever
    the layer methods."""
    from hookviz.vlm.explain import VlmRequest, explain_photo

    _, model, processor = llava
    passes = {"forward": 0, "backward": 0}
    grad = torch.autograd.grad

    def counted(*args, **kwargs):
        passes["backward"] += 1
        return grad(*args, **kwargs)

    monkeypatch.setattr(torch.autograd, "grad", counted)
    handle = model.register_forward_pre_hook(lambda *_: passes.__setitem__("forward", passes["forward"] + 1))
    try:
        request = VlmRequest(PROMPT, answer="a black cat", methods=("gradcam", "layercam"))
        result = explain_photo(model, processor, photo, request)
    finally:
        handle.remove()
    assert len(result.targets) == 3 and passes == {"forward": 1, "backward": 3}
    with torch.no_grad():
        logits = model(**result.conversation.inputs).logits[0, result.conversation.answer_positions].float()
    expected = torch.log_softmax(logits, -1).gather(-1, result.conversation.answer_ids[:, None]).squeeze(-1).exp()
    torch.testing.assert_close(result.probabilities, expected)


def test_bfloat16_gives_the_float32_answer_and_maps_close_to_its(llava, photo):
    import copy

    from hookviz.vlm.explain import VlmRequest, explain_photo

    _, model, processor = llava
    request = VlmRequest(PROMPT, answer="a black cat", methods=("gradcam",), layers=("projector",))
    full = explain_photo(model, processor, photo, request)
    half = explain_photo(copy.deepcopy(model).to(torch.bfloat16), processor, photo, request)
    assert half.conversation.text == full.conversation.text
    a, b = full.maps[0].maps.flatten(), half.maps[0].maps.flatten()
    assert torch.isfinite(b).all() and torch.corrcoef(torch.stack([a, b]))[0, 1] > 0.9


def test_logprob_for_a_model_that_writes_no_text_is_refused_in_one_line(tmp_path):
    from .cli_helpers import hookviz_run

    result = hookviz_run(SAMPLES / "cat.png", "--objective", "logprob", out=tmp_path / "out")
    assert result.exit_code == 2 and not (tmp_path / "out").exists()
    assert result.stderr.strip() == (
        "hookviz: error: --objective logprob: only a vision-language model's answer tokens take it; choose logit or ce"
    )


def test_hookviz_diff_of_a_vision_language_run_is_refused_in_one_line(tmp_path):
    """Its run.json is a run record (the explorer reads it) whose reports are no run's of layers:
    refused by name, where it stopped on 'truncated or not a report' of its first photo."""
    import json

    from hookviz.store.records import ImageStatus, RunRecord

    from .cli_helpers import hookviz_cli

    for name in ("base", "new"):
        (tmp_path / name / "cat").mkdir(parents=True)
        (tmp_path / name / "cat" / "report.json").write_text(json.dumps({"schema": "hookviz/vlm-report/1", "kind": "vlm"}))
        record = RunRecord(
            hookviz="0", model="hf:llava", task="describe", images=(ImageStatus("cat.png", "cat", "done", task="describe"),)
        )
        (tmp_path / name / "run.json").write_text(json.dumps(record.to_json()))
    result = hookviz_cli("diff", tmp_path / "base", tmp_path / "new")
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().endswith("a vision-language model's run; hookviz diff does not compare those yet")
    assert len(result.stderr.strip().splitlines()) == 1


def test_two_photos_of_one_stem_get_folders_of_their_own(llava, tmp_path):
    """As in any run (``store.folders.output_names``): they shared ``OUT/cat``, the second's files over the first's."""
    import json

    from .cli_helpers import hookviz_run

    for side in ("left", "right"):
        (tmp_path / side).mkdir()
        (tmp_path / side / "cat.png").write_bytes((SAMPLES / "cat.png").read_bytes())
    out = tmp_path / "out"
    result = hookviz_run(
        tmp_path / "left" / "cat.png", tmp_path / "right" / "cat.png", "--prompt", PROMPT, "--answer", "a cat", "--tokens", "1",
        "--cam", "gradcam,rollout", model=f"hf:{llava[0]}", weights=None, out=out,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    run = json.loads((out / "run.json").read_text())
    assert run["layers"] == ["model.vision_tower.encoder.layers.1"]  # the model's layers, not rollout's 'language'
    folders = [entry["output"] for entry in run["images"]]
    assert len(set(folders)) == 2 and all(name.startswith("cat-") for name in folders)
    images = {json.loads((out / name / "report.json").read_text())["image"] for name in folders}
    assert images == {entry["image"] for entry in run["images"]} and len(images) == 2


def _attention_by_hooks(model, inputs, keep_grad: bool):
    """The language model's logits and each of its layers' attention probabilities (1, H, L, L),
    caught by plain forward hooks on the eager attention modules (not ``output_attentions``)."""
    caught = []

    def hook(module, args, output):
        if keep_grad:
            output[1].retain_grad()
        caught.append(output[1])

    layers = model.model.language_model.layers
    handles = [layer.self_attn.register_forward_hook(hook) for layer in layers]
    try:
        logits = model(**inputs).logits[0]
    finally:
        for handle in handles:
            handle.remove()
    assert len(caught) == len(layers) == 2
    return logits, caught


def _on_grid(relevance, inputs, rows) -> torch.Tensor:
    """The rows of ``relevance`` (L, L) that predict the chosen tokens, summed, at the image tokens' columns."""
    image = torch.nonzero(inputs["input_ids"][0] == IMAGE_TOKEN).flatten()
    return relevance[rows].sum(0)[image].reshape(GRID, GRID)


@pytest.mark.parametrize("method", ["rollout", "chefer"])
def test_rollout_and_chefers_relevancy_are_the_hand_computed_ones(llava, method):
    """``hookviz.explain(..., cam=rollout|chefer)`` of each chosen word against a plain-torch
    computation on attention probabilities caught by hooks. Rollout (Abnar & Zuidema 2020): each
    layer's heads averaged, the identity added, rows renormalised, the layers multiplied from the
    first. Chefer et al. 2021: R = I, then per layer R += mean over heads of (dA/dscore * A)^+ @ R,
    the score the word's logit."""
    folder = llava[0]
    eager = transformers.LlavaForConditionalGeneration.from_pretrained(folder, attn_implementation="eager").eval()
    result = hookviz.explain(
        f"hf:{folder}", SAMPLES / "cat.png", prompts=PROMPT, answer="a black cat", words="black,cat", cam=method
    )
    inputs, answer = result.conversation.inputs, result.conversation.answer_ids
    (maps,) = [m.maps for m in result.maps if m.method == method]
    start = inputs["input_ids"].shape[1] - len(answer)
    assert [t.tokens for t in result.targets] == [(1,), (2,)] and maps.shape == (2, GRID, GRID)
    for k, token in enumerate((1, 2)):
        rows = [start - 1 + token]  # the position that predicts the token
        eye = torch.eye(inputs["input_ids"].shape[1])
        if method == "rollout":
            with torch.no_grad():
                _, attentions = _attention_by_hooks(eager, inputs, keep_grad=False)
            relevance = eye
            for attention in attentions:
                mixed = attention[0].mean(0) + eye
                relevance = (mixed / mixed.sum(-1, keepdim=True)) @ relevance
            assert torch.allclose(relevance.sum(-1), torch.ones(len(eye)))  # a product of row-stochastic matrices
        else:
            logits, attentions = _attention_by_hooks(eager, inputs, keep_grad=True)
            logits[rows[0], answer[token]].backward()
            relevance = eye
            for attention in attentions:
                relevance = relevance + (attention.grad[0] * attention[0].detach()).clamp(min=0).mean(0) @ relevance
        expected = _on_grid(relevance, inputs, rows)
        assert expected.max() > expected.min()  # a map that can tell a wrong one
        torch.testing.assert_close(maps[k], expected, rtol=1e-4, atol=1e-7)
