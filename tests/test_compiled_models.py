"""``hookviz.explain(torch.compile(model))`` (issue 37): the module ``torch.compile`` wraps is
explained, with the paths the caller knows (``layer4``, not ``_orig_mod.layer4``), and a note
says so; the caller's compiled model is left as it was."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision

import hookviz


@pytest.mark.slow  # imports TorchDynamo (about 2 s of CPU) and explains resnet18 three times, measured
def test_a_compiled_model_is_explained_as_the_module_it_wraps():
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=5).eval()
    compiled = torch.compile(model)
    clip = torch.rand(3, 64, 64)
    plain = hookviz.explain(model, clip, layers=["layer4"], target=1)
    default = hookviz.explain(compiled, clip, target=1)  # the usual layer found: no "no module outputs a 4-D map"
    named = hookviz.explain(compiled, clip, layers=["layer4"], target=1)
    assert default.layers[0].name == "layer4"  # resnet18's usual layer, as for the plain model
    assert named.model == "ResNet" and [layer.name for layer in named.layers] == ["layer4"]
    np.testing.assert_allclose(named.layers[0].cam, plain.layers[0].cam, rtol=1e-5, atol=1e-7)
    said = [note for note in named.notes if "torch.compile" in note]
    assert said and "layer4, not _orig_mod.layer4" in said[0] and not any("in place" in note for note in named.notes)
    assert [row.path for row in hookviz.list_layers(compiled)][:2] == ["conv1", "bn1"]
    with pytest.raises(hookviz.errors.UnknownLayerError, match="did you mean 'layer4'"):
        hookviz.explain(compiled, clip, layers=["_orig_mod.layer4"])
    # the caller's model: still compiled, same module, no hook left, its mode kept
    assert type(compiled).__name__ == "OptimizedModule" and compiled._orig_mod is model and not model.training
    assert all(not m._forward_hooks and not m._forward_pre_hooks and not m._backward_hooks for m in model.modules())
