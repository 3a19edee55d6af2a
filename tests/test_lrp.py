"""``lrp`` (``hookviz.methods.lrp``) against zennit itself, on random-weight vgg11_bn and
resnet18: the same composites and canonizers through zennit's own ``Gradient`` attributor,
maps within 1e-3 of their largest value; the model as it was afterwards; conservation in
the report; the one-line refusals."""

from __future__ import annotations

import copy
import sys

import numpy as np
import pytest
import torch
import torchvision
from PIL import Image

import hookviz
from hookviz import Explainer, LayerOptions, TargetOptions
from hookviz.errors import UsageError
from hookviz.inputs.images import LoadedSample, PreparedSample, Preprocessing
from hookviz.methods import lrp as lrp_module
from hookviz.methods.lrp import LrpSettings
from hookviz.models.loading import LoadedModel

pytest.importorskip("zennit")

SIDE = 64
TARGET = 8


def relevance_maps(model, batch, layer: str, method: str, target: int = TARGET, settings=()):
    """hookviz's maps of ``batch`` by ``method`` (N, C, H, W), and each image's figures;
    ``settings``: the method's option groups, as the command and explain() hand them on."""
    images = [PreparedSample(LoadedSample(None, Image.new("RGB", (8, 8))), t, np.zeros((SIDE, SIDE, 3), np.uint8)) for t in batch]
    loaded = LoadedModel("seeded", model, "seeded", None, Preprocessing())
    options = TargetOptions(target=str(target), cam=method, settings=tuple(settings))
    results = Explainer.create(loaded, layers=LayerOptions((layer,)), target=options).explain_batch(images)
    return np.stack([r.pixel_maps[method].map for r in results]), [r.pixel_maps[method].figures for r in results]


def zennit_maps(model, batch, composite, target: int = TARGET) -> np.ndarray:
    """zennit's own attribution: its Gradient attributor, relevance starting at the target's logit."""
    from zennit.attribution import Gradient

    with Gradient(model, composite) as attributor:
        _, relevance = attributor(batch, lambda out: torch.eye(out.shape[1])[[target] * len(out)] * out)
    return relevance.detach().numpy()


def state(model) -> tuple:
    """What the pass must leave as it was: parameters and buffers (values and objects), hooks, mode."""
    tensors = {name: (id(t), t.detach().clone()) for name, t in model.state_dict(keep_vars=True).items()}
    hooks = [(len(m._forward_hooks), len(m._forward_pre_hooks), len(m._backward_hooks)) for m in model.modules()]
    return tensors, hooks, [type(m) for m in model.modules()], [m.forward for m in model.modules()], model.training


def same_state(before, after) -> bool:
    (tensors, *rest), (now, *rest_now) = before, after
    same = tensors.keys() == now.keys() and all(
        tensors[k][0] == now[k][0] and torch.equal(tensors[k][1], now[k][1]) for k in tensors
    )
    return same and rest == rest_now


@pytest.fixture(scope="module")
def batch():
    torch.manual_seed(1)
    return torch.randn(2, 3, SIDE, SIDE)


def _model(name: str):
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None).eval()
    for module in model.modules():  # random statistics, so that merging BatchNorm changes something
        if isinstance(module, torch.nn.BatchNorm2d):
            module.running_mean.normal_(0, 0.1)
            module.running_var.uniform_(0.5, 1.5)
    return model


@pytest.mark.parametrize(
    ("name", "layer"), [pytest.param("vgg11_bn", "features.0", marks=pytest.mark.slow), ("resnet18", "layer4")]
)
def test_lrp_equals_zennits_epsilon_plus_flat_and_leaves_the_model_as_it_was(batch, name, layer):
    from zennit.composites import EpsilonPlusFlat
    from zennit.torchvision import ResNetCanonizer, VGGCanonizer

    model = _model(name)
    before = state(model)
    mine, figures = relevance_maps(model, batch, layer, "lrp")
    assert same_state(before, state(model))
    canonizer = VGGCanonizer() if name == "vgg11_bn" else ResNetCanonizer()
    theirs = zennit_maps(copy.deepcopy(model), batch, EpsilonPlusFlat(canonizers=[canonizer]))
    assert mine.shape == theirs.shape == (2, 3, SIDE, SIDE) and np.abs(theirs).max() > 0
    assert np.abs(mine - theirs).max() / np.abs(theirs).max() < 1e-3
    logits = model(batch)[:, TARGET].detach().double()
    for n, found in enumerate(figures):  # the map's sum against the logit it started from
        assert found["relevance"] == pytest.approx(float(mine[n].astype(np.float64).sum()), rel=1e-5)
        assert found["score"] == pytest.approx(float(logits[n]), rel=1e-4)
        assert found["conservation"] == pytest.approx(found["relevance"] / found["score"])


@pytest.mark.slow  # over 1.4 s of CPU, measured
def test_lrp_epsilon_gamma_box_equals_zennits_with_each_images_own_box(batch):
    from zennit.composites import EpsilonGammaBox
    from zennit.torchvision import ResNetCanonizer

    model = _model("resnet18")
    mine, _ = relevance_maps(model, batch, "layer4", "lrp", settings=[LrpSettings(lrp_composite="epsilon-gamma-box")])
    theirs = []
    for photo in batch:
        low, high = photo.amin(dim=(1, 2))[None, :, None, None], photo.amax(dim=(1, 2))[None, :, None, None]
        composite = EpsilonGammaBox(low=low, high=high, canonizers=[ResNetCanonizer()])
        theirs.append(zennit_maps(copy.deepcopy(model), photo[None], composite)[0])
    theirs = np.stack(theirs)
    assert np.abs(mine - theirs).max() / np.abs(theirs).max() < 1e-3


def test_lrp_settings_are_checked_in_one_line():
    for bad in ({"lrp_composite": "alpha-beta"}, {"lrp_epsilon": 0}, {"lrp_gamma": -1.0}, {"lrp_gamma": float("nan")}):
        with pytest.raises(UsageError) as caught:
            LrpSettings(**bad)
        assert "\n" not in str(caught.value) and "lrp_" in str(caught.value)
    assert hookviz.methods.get_method("lrp").options is LrpSettings


def test_lrp_refuses_a_layer_type_without_a_rule_in_one_line():
    model = torchvision.models.VisionTransformer(image_size=32, patch_size=16, num_layers=1, num_heads=2, hidden_dim=8, mlp_dim=8)
    with pytest.raises(UsageError) as caught:
        lrp_module.check_lrp(model)
    message = str(caught.value)
    assert "\n" not in message and "LayerNorm" in message and "attnlrp" in message


@pytest.mark.slow  # over 1.4 s of CPU, measured
def test_a_missing_extra_is_one_line_naming_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "zennit", None)  # import zennit now raises ImportError
    with pytest.raises(UsageError) as caught:
        lrp_module.check_lrp(_model("vgg11_bn"))
    assert "\n" not in str(caught.value) and "pip install 'hookviz[lrp]'" in str(caught.value)


def test_lrp_joins_other_methods_and_the_trust_checks(batch):
    from tests.conftest import tiny_net

    result = hookviz.explain(tiny_net(), batch[0, :, :24, :24], layers=["features.3"], cam="gradcam,lrp", sanity=True)
    assert result["features.3"].cam is not None and result["features.3"].trust.sanity is not None
    found = result.pixel_maps["lrp"]
    assert found.map.shape == (3, 24, 24) and set(found.figures) == {"relevance", "score", "conservation"}


def test_the_composite_reaches_lrp_from_the_command_and_from_explain(batch, tmp_path):
    from tests.cli_helpers import hookviz_cli
    from tests.conftest import tiny_net

    photo = batch[0, :, :24, :24]
    default = hookviz.explain(tiny_net(), photo, layers=["features.3"], cam="lrp")
    boxed = hookviz.explain(tiny_net(), photo, layers=["features.3"], cam="lrp", lrp_composite="epsilon-gamma-box")
    assert not np.allclose(default.pixel_maps["lrp"].map, boxed.pixel_maps["lrp"].map)
    assert boxed.asked["settings"]["lrp"]["lrp_composite"] == "epsilon-gamma-box"
    with pytest.raises(UsageError) as caught:
        hookviz.explain(tiny_net(), photo, layers=["features.3"], cam="gradcam", lrp_composite="epsilon-gamma-box")
    assert "\n" not in str(caught.value) and "only lrp takes it" in str(caught.value)
    result = hookviz_cli("run", "--cam", "gradcam", "--lrp-composite", "epsilon-gamma-box", tmp_path)
    assert result.exit_code == 2 and "--lrp-composite epsilon-gamma-box: only lrp takes it" in result.output


def test_hookviz_imports_and_lists_the_methods_without_zennit():
    from tests.conftest import python_output

    code = "import sys; sys.modules['zennit'] = None; import hookviz.methods as m; print(','.join(m.method_names()))"
    names = python_output(code).strip().split(",")
    assert "lrp" in names and "attnlrp" in names


def test_a_gamma_that_no_rule_of_the_composite_reads_is_refused(batch, tmp_path):
    """epsilon-plus-flat has no Gamma rule: ``--lrp-gamma`` beside it changed nothing and was
    kept in the report as if it had."""
    from tests.cli_helpers import hookviz_cli

    with pytest.raises(UsageError) as caught:
        LrpSettings(lrp_gamma=0.5)
    assert str(caught.value) == (
        "lrp_gamma=0.5: only the epsilon-gamma-box composite has a Gamma rule, and lrp_composite='epsilon-plus-flat' "
        "has none; add lrp_composite='epsilon-gamma-box' or drop the option"
    )
    assert LrpSettings(lrp_composite="epsilon-gamma-box", lrp_gamma=0.5).lrp_gamma == 0.5
    result = hookviz_cli("run", "--cam", "lrp", "--lrp-gamma", "0.5", tmp_path)
    assert result.exit_code == 2 and result.output.strip().splitlines() == [
        "hookviz: error: --lrp-gamma 0.5: only the epsilon-gamma-box composite has a Gamma rule, and --lrp-composite "
        "epsilon-plus-flat has none; add --lrp-composite epsilon-gamma-box or drop the option"
    ], result.output


class _PackagedIdentity(torch.nn.Module):
    """A package's own identity (efficientnet_lite_pytorch's utils.Identity): not torch's class."""

    def forward(self, x):
        return x


class _Doubling(torch.nn.Module):
    def forward(self, x):
        return 2 * x


def _padded_net():
    torch.manual_seed(0)
    layers = [torch.nn.ZeroPad2d((0, 1, 0, 1)), torch.nn.Conv2d(3, 6, 3, stride=2), torch.nn.ReLU6(), _PackagedIdentity()]
    layers += [torch.nn.Conv2d(6, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(8, 10)).eval()


def test_zero_padding_and_a_packaged_identity_pass_relevance_on_as_zennit_does(batch):
    """efficientnet_lite0 (the demo's model) was refused: its ZeroPad2d and its package's own
    Identity had no rule, though relevance passes both as it is."""
    from zennit.composites import EpsilonPlusFlat

    model = _padded_net()
    lrp_module.check_lrp(model)
    mine, _ = relevance_maps(model, batch, "4", "lrp")
    theirs = zennit_maps(copy.deepcopy(model), batch, EpsilonPlusFlat())
    np.testing.assert_allclose(mine, theirs, rtol=1e-4, atol=1e-6 * np.abs(theirs).max())
    model[3] = _Doubling()  # parameter-free, but not the tensor it is given: no rule says what it does
    with pytest.raises(UsageError, match=r"has a _Doubling \(3\), a layer type zennit's LRP rules do not cover"):
        lrp_module.check_lrp(model)
    model[3], model[0] = _PackagedIdentity(), torch.nn.ConstantPad2d(1, 0.5)  # padded with 0.5: that adds relevance
    with pytest.raises(UsageError, match=r"has a ConstantPad2d \(0\)"):
        lrp_module.check_lrp(model)


class _Residual(torch.nn.Module):
    """A residual sum no canonizer knows (efficientnet_lite0's blocks add theirs in forward)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv1, self.act1 = torch.nn.Conv2d(3, 8, 3, padding=1, bias=False), torch.nn.ReLU()
        self.conv2, self.act2 = torch.nn.Conv2d(8, 8, 3, padding=1, bias=False), torch.nn.ReLU()
        self.pool, self.flat, self.fc = torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 10, bias=False)

    def forward(self, x):
        a = self.act1(self.conv1(x))
        return self.fc(self.flat(self.pool(a + self.act2(self.conv2(a)))))


def test_relevance_made_beyond_the_score_gets_a_note_and_relevance_lost_to_biases_none(batch):
    """efficientnet_lite0's lrp map summed to 11 times its logit with no word: a residual sum
    outside zennit's canonizers hands each branch the whole relevance (here twice the score)."""
    from zennit.composites import EpsilonPlusFlat

    model, photo = _Residual().eval(), batch[0, :, :32, :32]
    explanation = hookviz.explain(model, photo, cam="lrp", target=TARGET)
    theirs = zennit_maps(copy.deepcopy(model), photo[None], EpsilonPlusFlat())
    with torch.no_grad():
        score = float(model(photo[None])[0, TARGET])
    ratio = float(theirs.sum()) / score
    assert ratio == pytest.approx(2.0, abs=1e-3)  # the sum's two branches, each with all of it
    found = explanation.pixel_maps["lrp"].figures
    assert found["conservation"] == pytest.approx(ratio, rel=1e-4)
    assert [n for n in explanation.notes if "lrp:" in n] == [
        f"<in-memory image>: lrp: its relevance sums to {found['relevance']:.4g}, {found['conservation']:.3g} times the "
        f"score it started from ({found['score']:.4g}): rules that do not conserve it are at work (a residual sum "
        "outside torchvision's ResNet blocks, a BatchNorm that cannot merge into the convolution before it); the map "
        "still ranks the pixels, but its values are no shares of the score"
    ]
    kept = hookviz.explain(_padded_net(), batch[0], cam="lrp", target=TARGET)
    assert 0 < kept.pixel_maps["lrp"].figures["conservation"] < 1  # the biases took a share: said in the docs, no note
    assert not [n for n in kept.notes if "lrp:" in n]
