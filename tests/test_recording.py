"""Recording against an independent computation: the usual snippet's plain hooks."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torchvision

from bench.hook_snippet import SaveValues as SnippetSaveValues  # the blog posts' own class
from hookviz.errors import UnknownLayerError
from hookviz.explaining.recording import record

from .cli_helpers import hookviz_cli


def _hook_count(model) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) + len(m._backward_hooks) for m in model.modules())


def test_resnet50_layer3_matches_the_usual_snippet_with_ce():
    torch.manual_seed(0)
    model = torchvision.models.resnet50(weights=None).eval()
    x = torch.randn(1, 3, 224, 224)
    target = torch.tensor([3])

    with record(model, ["layer3.-1"]) as rec:
        logits = model(x)
        rec.backward(nn.functional.cross_entropy(logits, target))
    ours = rec["layer3.-1"]
    assert ours.name == "layer3.5"

    # The snippet needs the in-place ReLUs off (full backward hooks break on them).
    for module in model.modules():
        if isinstance(module, nn.ReLU):
            module.inplace = False
    snippet = SnippetSaveValues(model.layer3[-1])
    nn.functional.cross_entropy(model(x), target).backward()
    snippet.remove()

    for key in ("input", "output", "grad_input", "grad_output"):
        mine, theirs = getattr(ours, key), getattr(snippet, key).detach()
        assert mine.shape == theirs.shape
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-7, msg=f"{key} differs")
        assert theirs.abs().max() > 0


@pytest.mark.slow  # over 1.4 s of CPU, measured
def test_vgg16_bn_features18_works_where_the_full_backward_hook_fails():
    torch.manual_seed(0)
    model = torchvision.models.vgg16_bn(weights=None).eval()
    x = torch.randn(1, 3, 224, 224)

    snippet = SnippetSaveValues(model.features[18])
    with pytest.raises(RuntimeError, match="is a view and is being modified inplace"):
        model(x)[0, 1].backward()
    snippet.remove()

    with record(model, ["features.18"]) as rec:
        logits = model(x)
        rec.backward(logits[0, 1])
    capture = rec["features.18"]
    assert capture.output.shape == (1, 256, 56, 56)
    # The value recorded is BatchNorm's output, before the in-place ReLU that follows it.
    assert capture.output.min() < 0
    # Reference: grad_output by autograd on a copy of the model without in-place ops.
    for module in model.modules():
        if isinstance(module, nn.ReLU):
            module.inplace = False
    store = {}
    handle = model.features[18].register_forward_hook(lambda m, i, o: store.update(out=o))
    reference_logits = model(x)
    handle.remove()
    (grad,) = torch.autograd.grad(reference_logits[0, 1], store["out"])
    torch.testing.assert_close(capture.output, store["out"].detach())
    torch.testing.assert_close(capture.grad_output, grad)
    assert _hook_count(model) == 0


def test_reused_module_is_recorded_per_call(tiny):
    x = torch.randn(2, 3, 16, 16)
    with record(tiny, ["act"]) as rec:
        rec.backward(tiny(x)[:, 0].sum())
    names = [c.name for c in rec.captures]
    assert names == ["act:0", "act:1"]
    first, second = rec["act:0"], rec["act:1"]
    # The second call's input is 1.5 times the first call's output.
    torch.testing.assert_close(second.input, first.output * 1.5)
    with pytest.raises(KeyError, match="act:0"):
        rec["act"]
    with record(tiny, ["act:1"]) as rec:
        rec.backward(tiny(x)[:, 0].sum())
    assert [c.name for c in rec.captures] == ["act:1"]


def test_grad_input_is_this_modules_own_vjp(tiny):
    x = torch.randn(1, 3, 16, 16)
    with record(tiny, ["features.3"]) as rec:
        rec.backward(tiny(x)[0, 2])
    capture = rec["features.3"]
    conv = tiny.features[3]
    inp = capture.input.clone().requires_grad_(True)
    (expected,) = torch.autograd.grad(conv(inp), inp, capture.grad_output)
    torch.testing.assert_close(capture.grad_input, expected)


def test_users_own_backward_is_caught_by_tensor_hooks(tiny):
    x = torch.randn(1, 3, 16, 16)
    with record(tiny, ["features.1"]) as rec:
        loss = tiny(x).logsumexp(dim=1).sum()
        loss.backward()
    capture = rec["features.1"]
    assert capture.grad_output is not None and capture.grad_input is not None
    assert capture.grad_output.shape == capture.output.shape
    assert tiny.fc.weight.grad is not None  # the user's backward was untouched


def test_hooks_are_removed_after_an_exception(tiny):
    with pytest.raises(ValueError):
        with record(tiny, ["features.0", "fc"]):
            assert _hook_count(tiny) > 0
            raise ValueError("boom")
    assert _hook_count(tiny) == 0


def test_hooks_are_removed_when_the_forward_pass_fails(tiny):
    with pytest.raises(RuntimeError):
        with record(tiny, ["features.0"]):
            tiny(torch.randn(1, 4, 16, 16))  # wrong channel count
    assert _hook_count(tiny) == 0


def test_unused_layer_reports_no_gradient():
    class TwoHeads(nn.Module):
        def __init__(self):
            super().__init__()
            self.used = nn.Linear(4, 3)
            self.unused = nn.Linear(4, 3)

        def forward(self, x):
            self.unused(x)
            return self.used(x)

    model = TwoHeads()
    with record(model, ["unused", "used"]) as rec:
        rec.backward(model(torch.randn(2, 4)).sum())
    assert rec["unused"].grad_output is None
    assert rec["used"].grad_output is not None


def test_unknown_layer_suggests_close_names(tiny):
    with pytest.raises(UnknownLayerError, match="features"):
        record(tiny, ["featurs.0"])


class _Output(dict):
    """A dict subclass with attributes, as transformers' ModelOutput is."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.__dict__.update(self)

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        setattr(self, key, value)


class _Backbone(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        from collections import namedtuple

        y = self.conv(x)
        Pair = namedtuple("Pair", "features pooled")
        return _Output(last_hidden_state=y, extra=Pair(y.relu(), y.mean()))


class _Reader(nn.Module):
    """Reads its backbone's output by attribute, as a transformers model's head does."""

    def __init__(self):
        super().__init__()
        self.backbone = _Backbone()
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        out = self.backbone(x)
        assert isinstance(out, _Output) and type(out.extra).__name__ == "Pair"
        return self.fc(out.last_hidden_state.mean(dim=(2, 3)) + out.extra.features.mean(dim=(2, 3)))


def test_recording_keeps_the_type_of_a_layers_output():
    model = _Reader().eval()
    x = torch.randn(1, 3, 8, 8)
    expected = model(x)
    with record(model, ["backbone"]) as rec:
        logits = model(x)
        rec.backward(logits[0, 1])
    torch.testing.assert_close(logits, expected)
    assert rec["backbone"].output.shape == (1, 4, 6, 6) and rec["backbone"].grad_output is not None


def test_recording_keeps_transformers_model_output():
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_outputs import BaseModelOutputWithPooling

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(4, 4)

        def forward(self, x):
            return BaseModelOutputWithPooling(last_hidden_state=self.proj(x), pooler_output=x.mean(1))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = Encoder()

        def forward(self, x):
            return self.encoder(x).last_hidden_state.sum(dim=1)

    model = Model().eval()
    with record(model, ["encoder"]) as rec:
        rec.backward(model(torch.randn(2, 5, 4)).sum())
    assert rec["encoder"].output.shape == (2, 5, 4) and transformers.__version__


class _Join(nn.Module):
    """Concatenates a list of maps, as ultralytics' ``Concat`` does: its input is no tensor."""

    def forward(self, parts):
        return torch.cat(parts, dim=1)


class _Joined(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.left, self.right = nn.Conv2d(3, 4, 3, stride=2, padding=1), nn.Conv2d(3, 2, 3, stride=2, padding=1)
        self.join = _Join()
        self.head = nn.Linear(6, 5)

    def forward(self, x):
        return self.head(self.join([self.left(x), self.right(x)]).relu().mean(dim=(2, 3)))


def joined_net() -> nn.Module:
    """Factory used as ``--model tests.test_recording:joined_net``."""
    return _Joined()


def test_a_layer_whose_input_is_a_list_gets_its_gradient_and_cam(tmp_path):
    # before: nothing upstream needed a gradient and the list input made no leaf, so a YOLO's
    # Concat (yolo.model.20) was "no CAM: the target's logit does not depend on this layer"
    from hookviz import explain

    model, image = _Joined().eval(), torch.rand(3, 32, 32, generator=torch.Generator().manual_seed(2))
    (layer,) = explain(model, image, layers=["join"], target=3, preprocessing=None).layers
    assert layer.cam_note is None and layer.cam is not None
    joined = model.join([model.left(image[None]), model.right(image[None])]).detach().requires_grad_(True)
    (grad,) = torch.autograd.grad(model.head(joined.relu().mean(dim=(2, 3)))[0, 3], joined)
    expected = (grad.mean(dim=(2, 3), keepdim=True) * joined).sum(dim=1).relu()[0].detach().numpy()
    torch.testing.assert_close(torch.from_numpy(layer.cam), torch.from_numpy(expected), rtol=1e-4, atol=1e-7)

    from tests.conftest import SAMPLES

    args = ["run", "--model", "tests.test_recording:joined_net", "--weights", "none", "--layer", "join", "--crop", "32"]
    result = hookviz_cli(*args, "--resize", "32", "--pictures", "cam", SAMPLES / "cat.png", "-o", tmp_path)
    assert result.exit_code == 0 and "does not depend" not in result.output, result.output
    assert (tmp_path / "cat" / "join.cam.png").is_file()
