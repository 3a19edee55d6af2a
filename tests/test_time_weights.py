"""``--time-weights`` over the Grad-CAM family (issue 28): Grad-CAM, Grad-CAM++ and XGrad-CAM
share one option group (``hookviz.methods.time_weights``); with ``frame``, each time slice of a
clip's map is the method's 2-D map of that slice alone, as pytorch-grad-cam's own 2-D weights
make it. LayerCAM and HiResCAM pool nothing: their map is a frame's own already, and the option
is refused with only them asked."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import hookviz
from hookviz.errors import UsageError

from .video_clips import Conv3dNet

pytest.importorskip("pytorch_grad_cam")


def _clip_and_model():
    torch.manual_seed(3)
    model = Conv3dNet().eval()
    clip = torch.randn(3, 4, 12, 12)
    return model, clip, int(model(clip[None]).argmax())


def _recorded(model, clip, target):
    """``features.2``'s output (1, C, T, H, W) and its gradient of the target's logit, by hand: the
    second convolution, before its ReLU, so that its gradient varies in time (after it, the mean
    pool and linear head give every position one gradient, and both readings one map)."""
    kept = {}

    def keep(module, args, output):
        output.retain_grad()
        kept["output"] = output

    handle = model.features[2].register_forward_hook(keep)
    try:
        model(clip[None])[0, target].backward()
    finally:
        handle.remove()
    return kept["output"].detach().numpy(), kept["output"].grad.detach().numpy()


def _per_slice(reference_class, activations, gradients):
    """Each time slice's 2-D map with pytorch-grad-cam's own channel weights of that slice alone."""
    slices = []
    for t in range(activations.shape[2]):
        a, g = activations[:, :, t], gradients[:, :, t]
        weights = reference_class.get_cam_weights(None, None, None, None, a, g)  # (1, C): their formula
        slices.append(np.maximum((weights[:, :, None, None] * a).sum(axis=1), 0))
    return np.stack(slices, axis=1)[0]


@pytest.mark.parametrize("method", ["gradcam", "gradcam++", "xgradcam"])
def test_frame_weights_are_each_slices_own_2d_weights(method):
    from pytorch_grad_cam import GradCAM, GradCAMPlusPlus, XGradCAM

    reference = {"gradcam": GradCAM, "gradcam++": GradCAMPlusPlus, "xgradcam": XGradCAM}[method]
    model, clip, target = _clip_and_model()
    activations, gradients = _recorded(model, clip, target)
    by_frame = hookviz.explain(model, clip, layers=["features.2"], target=target, cam=method, time_weights="frame")
    by_clip = hookviz.explain(model, clip, layers=["features.2"], target=target, cam=method, time_weights="clip")
    expected = _per_slice(reference, activations, gradients)
    ours = by_frame.layers[0].cam
    assert ours.shape == (4, 6, 6)
    np.testing.assert_allclose(ours, expected, rtol=1e-4, atol=1e-6 * float(np.abs(expected).max()))
    assert np.abs(by_clip.layers[0].cam - ours).max() > 0.01 * ours.max()  # the clip's weights make another map
    assert by_frame.asked["settings"] == {method: {"time_weights": "frame"}}


def test_one_flag_sets_every_method_of_the_family_asked():
    model, clip, target = _clip_and_model()
    both = hookviz.explain(model, clip, layers=["features.2"], target=target, cam="gradcam,xgradcam", time_weights="frame")
    assert both.asked["settings"] == {"gradcam,xgradcam": {"time_weights": "frame"}}
    alone = hookviz.explain(model, clip, layers=["features.2"], target=target, cam="xgradcam", time_weights="frame")
    np.testing.assert_allclose(both.layers[0].cams["xgradcam"], alone.layers[0].cam, rtol=1e-6)


@pytest.mark.parametrize("method", ["layercam", "hirescam"])
def test_layercam_and_hirescam_pool_nothing_and_refuse_the_option(method):
    model, clip, target = _clip_and_model()
    activations, gradients = _recorded(model, clip, target)
    ours = hookviz.explain(model, clip, layers=["features.2"], target=target, cam=method).layers[0].cam
    weights = np.maximum(gradients, 0) if method == "layercam" else gradients
    slices = [np.maximum((weights[:, :, t] * activations[:, :, t]).sum(axis=1), 0)[0] for t in range(4)]
    np.testing.assert_allclose(ours, np.stack(slices), rtol=1e-4, atol=1e-7)  # each frame's map from that frame alone
    with pytest.raises(UsageError, match="time_weights.*gradcam"):
        hookviz.explain(model, clip, layers=["features.2"], target=target, cam=method, time_weights="frame")
