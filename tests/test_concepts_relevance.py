"""Each channel's contribution to a class's score (``hookviz.concepts.relevance``), held to a
hand computation and to zennit-crp's own reference sampling ("RelMax")."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.nn as nn

from hookviz.concepts.relevance import channel_relevance
from hookviz.errors import UsageError


def _net(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(3, 6, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(6, 8, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 5, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(5, 4),
    ).eval()


def _images(count: int = 6, seed: int = 1) -> torch.Tensor:
    return torch.randn(count, 3, 12, 12, generator=torch.Generator().manual_seed(seed))


def test_gradient_x_activation_before_a_pooled_linear_head_is_each_channels_term_of_the_logit():
    model = _net()
    images = _images()
    found = channel_relevance(model, "6", images, "predicted")
    with torch.no_grad():
        pooled = model[:8](images).flatten(1)  # the layer's output, averaged over positions
        logits = model(images)
    picked = logits.argmax(1)
    terms = pooled * model[9].weight[picked].detach()  # w_c * mean(A_c): the channel's share of the logit
    assert np.allclose(found.contributions, terms.double().numpy(), atol=1e-6)
    assert np.allclose(
        found.contributions.sum(1) + model[9].bias[picked].detach().numpy(), logits.max(1).values.numpy(), atol=1e-5
    )
    assert found.classes.tolist() == picked.tolist() and found.grid == (6, 6)


def test_a_named_class_and_an_index_pick_that_logit_and_bad_ones_are_refused():
    model, images = _net(), _images(3)
    by_name = channel_relevance(model, "2", images, "b", categories=("a", "b", "c", "d"))
    by_index = channel_relevance(model, "2", images, 1)
    assert by_name.classes.tolist() == [1, 1, 1]
    assert np.array_equal(by_name.contributions, by_index.contributions)
    with pytest.raises(UsageError, match="has 4 classes"):
        channel_relevance(model, "2", images, 7)
    with pytest.raises(UsageError, match="no such class"):
        channel_relevance(model, "2", images, "zebra", categories=("a", "b", "c", "d"))
    with pytest.raises(UsageError, match="relevance_rule"):
        channel_relevance(model, "2", images, rule="occlusion")


def test_the_model_is_left_as_it_was():
    model = _net().train()
    flags = [p.requires_grad for p in model.parameters()]
    channel_relevance(model, "2", _images(2), rule="lrp")
    assert model.training and [p.requires_grad for p in model.parameters()] == flags
    assert not any(m._forward_hooks or m._forward_pre_hooks or m._backward_hooks for m in model.modules())


def _crp_relevances(model, layer, images, classes):
    """zennit-crp's own: CondAttribution with the class as its condition, the layer recorded."""
    import crp.attribution as crp_attribution  # the README's test command installs zennit-crp (--no-deps)
    from zennit.canonizers import SequentialMergeBatchNorm
    from zennit.composites import EpsilonPlusFlat

    attribution = crp_attribution.CondAttribution(copy.deepcopy(model))
    data = images.clone().requires_grad_(True)
    conditions = [{"y": [int(c)]} for c in classes]
    composite = EpsilonPlusFlat(canonizers=[SequentialMergeBatchNorm()])
    result = attribution(data, conditions, composite, record_layer=[layer])
    return result.relevances[layer]


@pytest.mark.parametrize("layer", ["2", "5"])
def test_lrp_relevance_is_zennit_crps_relmax_per_image_and_its_ranking(layer):
    from crp.concepts import ChannelConcept

    model, images = _net(), _images(8)
    found = channel_relevance(model, layer, images, "predicted", rule="lrp", keep_maps=True)
    relevance = _crp_relevances(model, layer, images, found.classes)
    assert np.allclose(found.maps, relevance.double().numpy(), rtol=1e-5, atol=1e-7)
    # zennit-crp's reference sampling ("RelMax", summed, unnormalised): images ranked per channel
    order, values, neurons = ChannelConcept().reference_sampling(relevance, layer, max_target="sum", abs_norm=False)
    ours = np.argsort(-found.contributions, axis=0, kind="stable")
    assert np.array_equal(ours[:3], order[:3].numpy())
    assert np.allclose(np.take_along_axis(found.contributions, ours, 0), values.double().numpy(), rtol=1e-5, atol=1e-7)
    # its receptive-field neuron: the most relevant unit of the image's map
    assert np.array_equal(np.take_along_axis(found.peaks, ours, 0), neurons.numpy())


def test_lrp_on_a_model_with_batchnorm_matches_zennit_crp_with_the_batchnorm_merged():
    torch.manual_seed(3)
    model = nn.Sequential(
        nn.Conv2d(3, 6, 3, padding=1),
        nn.BatchNorm2d(6),
        nn.ReLU(),
        nn.Conv2d(6, 5, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(5, 3),
    ).eval()
    model[1].running_mean.uniform_(-0.5, 0.5)
    model[1].running_var.uniform_(0.5, 2.0)
    images = _images(4)
    found = channel_relevance(model, "2", images, 2, rule="lrp", keep_maps=True)
    relevance = _crp_relevances(model, "2", images, found.classes)
    assert np.allclose(found.maps, relevance.double().numpy(), rtol=1e-5, atol=1e-7)
