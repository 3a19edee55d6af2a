"""The forward/backward pass and the notebook API, apart from the CLI."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from hookviz import Preprocessing, TargetOptions, explain
from hookviz.errors import TargetError, UsageError
from hookviz.modelstate import frozen_parameters
from hookviz.tasks.classify import logits_of
from hookviz.tasks.targets import parse_target

from .conftest import tiny_net

NAMES = ["tabby", "tiger cat", "Egyptian cat"]


def test_parse_target():
    assert parse_target("top1", NAMES) is None
    assert parse_target("2", NAMES) == 2
    assert parse_target("Tiger_Cat", NAMES) == 1
    with pytest.raises(TargetError, match="out of range"):
        parse_target("3", NAMES)
    with pytest.raises(TargetError, match="did you mean 'tabby'"):
        parse_target("taby", NAMES)


def test_options_are_checked():
    with pytest.raises(UsageError, match="objective='mse'"):
        TargetOptions(objective="mse")
    with pytest.raises(UsageError, match="topk=0"):
        TargetOptions(topk=0)


def test_logits_of_common_output_kinds():
    logits = torch.zeros(2, 5)
    assert logits_of({"logits": logits, "features": torch.zeros(2, 32)}) is logits
    assert logits_of({"out": logits, "aux": torch.zeros(2, 5)}) is logits
    assert logits_of([logits]) is logits
    assert logits_of((torch.zeros(2, 32), logits), "1") is logits
    with pytest.raises(UsageError, match="output_key='0' or output_key='1'"):
        logits_of((torch.zeros(2, 32), logits))  # an embedding and logits: which is which is not guessed
    with pytest.raises(UsageError, match="'embedding' 2x32, 'scores' 2x5"):
        logits_of({"embedding": torch.zeros(2, 32), "scores": logits})
    with pytest.raises(UsageError, match="not \\(batch, classes\\) logits"):
        logits_of(torch.zeros(2, 3, 4, 4))


def test_frozen_parameters_restores_flags_after_an_error():
    model = tiny_net()
    model.fc.weight.requires_grad_(False)
    with pytest.raises(RuntimeError):
        with frozen_parameters(model):
            assert not any(p.requires_grad for p in model.parameters())
            raise RuntimeError
    assert not model.fc.weight.requires_grad and model.fc.bias.requires_grad


def test_explain_takes_a_path_a_pil_image_or_a_tensor(photo):
    model = tiny_net().eval()
    from_path = explain(model, photo, layers=["features.3"])
    from_pil = explain(model, Image.open(photo), layers=["features.3"])
    from_tensor = explain(model, from_path.image.tensor, layers=["features.3"])
    np.testing.assert_allclose(from_pil.layers[0].output, from_path.layers[0].output)
    np.testing.assert_allclose(from_tensor.logits, from_path.logits, rtol=1e-5, atol=1e-6)
    assert from_path["features.3"].cam.shape == (112, 112)
    assert from_path.figure("features.3", "cam") is not None
    assert explain(model, photo).layers[0].requested == "(default)"


def _read_image(path, mode=None):
    """``torchvision.io.read_image``, as users call it (torchvision 0.29 deprecates its decoders)."""
    import warnings

    import torchvision

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return torchvision.io.read_image(str(path)) if mode is None else torchvision.io.read_image(str(path), mode)


def test_a_uint8_tensor_is_a_photo_preprocessed_as_its_path_is(lite0, cat):
    from torchvision.io import ImageReadMode

    stem = ["_conv_stem"]  # any layer: the prediction is what is compared
    from_path = explain(lite0, cat, layers=stem)
    pixels = _read_image(cat)
    assert pixels.dtype == torch.uint8 and pixels.shape[0] == 3
    for photo in (pixels, pixels[None], pixels.permute(1, 2, 0), _read_image(cat, ImageReadMode.RGB_ALPHA)):
        from_tensor = explain(lite0, photo, layers=stem)
        assert from_tensor.top5[0].name == from_path.top5[0].name == "Egyptian cat"
        np.testing.assert_allclose(from_tensor.logits, from_path.logits, rtol=1e-5, atol=1e-5)
        assert from_tensor.notes == from_path.notes
    with pytest.raises(UsageError, match="uint8 tensor is taken as a photo"):
        explain(lite0, torch.zeros(5, 8, 8, 6, dtype=torch.uint8), layers=stem)


def test_a_16_bit_tensor_from_read_image_is_a_photo_as_its_file_is(tmp_path):
    """torchvision.io.read_image returns uint16 for a 16-bit PNG: pixels, not the model's input."""
    from torchvision.io import ImageReadMode

    model = tiny_net().eval()
    path = tmp_path / "gray16.png"
    Image.fromarray((np.random.RandomState(0).rand(48, 64) * 65535).astype(np.uint16)).save(path)
    from_path = explain(model, path, layers=["features.3"])
    for mode in (None, ImageReadMode.RGB):
        pixels = _read_image(path, mode)
        assert pixels.dtype == torch.uint16
        from_tensor = explain(model, pixels, layers=["features.3"])
        np.testing.assert_allclose(from_tensor.logits, from_path.logits, rtol=1e-5, atol=1e-5)
        assert not any("raw pixels" in note for note in from_tensor.notes), from_tensor.notes


@pytest.mark.parametrize("dtype", [torch.float32, torch.uint8])
def test_an_empty_tensor_is_refused_in_one_line(dtype):
    with pytest.raises(UsageError, match=r"^image='3x0x64': the tensor is empty;"):
        explain(tiny_net().eval(), torch.zeros(3, 0, 64, dtype=dtype), layers=["features.3"])


def test_a_nan_input_is_explained_without_numpy_warnings(recwarn):
    result = explain(tiny_net().eval(), torch.full((3, 64, 64), float("nan")), layers=["features.3"])
    assert any("not all finite" in note for note in result.notes)
    assert [str(w.message) for w in recwarn if issubclass(w.category, RuntimeWarning)] == []


def test_a_float_tensor_stays_the_models_input_with_a_note_when_it_looks_like_pixels(lite0, cat):
    stem = ["_conv_stem"]
    pixels = _read_image(cat)
    prepared = explain(lite0, cat, layers=stem).image.tensor
    assert not any("raw pixels" in note for note in explain(lite0, prepared, layers=stem).notes)
    raw = explain(lite0, pixels.float(), layers=stem)  # taken as it is: the model sees 0-255
    assert any("raw pixels?" in note and "uint8 tensor" in note for note in raw.notes), raw.notes
    np.testing.assert_array_equal(raw.image.tensor.numpy(), pixels.float().numpy())
    with pytest.raises(UsageError, match="looks like H x W x C"):
        explain(lite0, pixels.permute(1, 2, 0).float() / 255, layers=stem)


def test_ce_objective_changes_gradients_not_cams(photo):
    model = tiny_net().eval()
    logit = explain(model, photo, layers=["features.3"], target=1)
    ce = explain(model, photo, layers=["features.3"], target=1, objective="ce")
    assert not np.allclose(logit.layers[0].grad_output, ce.layers[0].grad_output)
    np.testing.assert_allclose(logit.layers[0].cam, ce.layers[0].cam, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("layers", [["features.3"], None])  # None: the default layer's dry pass too
def test_explain_leaves_a_model_in_train_mode_as_it_was(photo, layers):
    model = tiny_net()
    model.features.append(torch.nn.Dropout(0.5))
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    first = explain(model, photo, layers=layers)
    second = explain(model, photo, layers=layers)
    assert model.training and all(m.training for m in model.modules())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # BatchNorm statistics too
    np.testing.assert_array_equal(first.logits, second.logits)  # no dropout: the same every time
    assert any("train mode" in note for note in first.notes)


def test_explain_leaves_the_callers_random_stream_and_sys_path_alone(photo, tmp_path, monkeypatch):
    import sys

    from hookviz import load_model

    monkeypatch.chdir(tmp_path)
    path = list(sys.path)
    model = tiny_net()  # (the test's own factory seeds the generator itself)
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    load_model("tests.conftest:tiny_net", "none", seed=5)  # a factory that seeds, then random init
    load_model("resnet18", "none", seed=5)
    explain(model, photo, layers=["features.3"])
    assert torch.equal(torch.rand(3), expected)
    assert sys.path == path


def test_the_library_refuses_what_the_command_refuses():
    from hookviz import PictureOptions

    with pytest.raises(UsageError, match="scale='foo': choose tile or shared"):
        PictureOptions(scale="foo")
    with pytest.raises(UsageError, match="pictures='bogus'"):
        PictureOptions(pictures=("bogus",))
    with pytest.raises(UsageError, match="cam='gradkam'"):
        explain(tiny_net(), torch.zeros(3, 32, 32), cam="gradkam")


def test_full_precision_restores_the_processs_tf32_flags():
    from hookviz.explaining.passes import full_precision

    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
        with full_precision("cuda:0"):
            assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
        with pytest.raises(RuntimeError), full_precision("cuda"):
            raise RuntimeError("a failing pass")
        assert torch.backends.cuda.matmul.allow_tf32
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn


def _small_vit(head_init: bool):
    from torchvision.models.vision_transformer import VisionTransformer

    torch.manual_seed(0)
    model = VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32, num_classes=10
    ).eval()
    if head_init:
        with torch.no_grad():
            model.heads.head.weight.normal_(0, 0.2)  # torchvision zero-inits the head: no gradient at all
    return model


def test_zero_gradient_note_names_the_last_blocks_first_norm_only_where_it_helps():
    first_norm = "encoder.layers.encoder_layer_1.ln_1"
    layers = ["encoder.layers.encoder_layer_1", "encoder.ln", first_norm]
    small = Preprocessing(resize=32, size=32)
    result = explain(_small_vit(head_init=True), torch.randn(3, 32, 32), layers=layers, target=3, preprocessing=small)
    for layer in (result[layers[0]], result["encoder.ln"]):
        assert not layer.cam.any()
        assert "zero gradient at every patch token" in layer.cam_note
        assert layer.cam_note.endswith(f"try layers='{first_norm}', the last block's first norm")
    assert result[first_norm].cam.any() and result[first_norm].cam_note is None
    # A head of zeros gives no gradient to anything, the class token included: no layer would help.
    result = explain(_small_vit(head_init=False), torch.randn(3, 32, 32), layers=layers, target=3, preprocessing=small)
    for layer in result.layers:
        assert layer.cam_note == "the target's logit has zero gradient at every position of this layer, so its CAM is zero"


def test_layer_types_take_one_class_name_as_layers_take_one_path(photo):
    model = tiny_net().eval()
    one = explain(model, photo, layer_types="Conv2d")  # not the letters C, o, n, ...
    assert [layer.name for layer in one.layers] == ["features.0", "features.3"]
    assert [layer.name for layer in explain(model, photo, layers="features.3").layers] == ["features.3"]
    with pytest.raises(UsageError, match=r"^layers=3: give a layer path such as layer3.-1$"):
        explain(model, photo, layers=3)
