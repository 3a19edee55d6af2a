"""A signal or a clip given in memory: a float (C, L) or (C, T, H, W) tensor (or a batch of one
clip) that ``hookviz.explain`` takes as the model's input as it is, and what pictures draw it on."""

from __future__ import annotations

import numpy as np

from hookviz.errors import UsageError, arg
from hookviz.inputs.images import LoadedSample, PreparedSample, Preprocessing
from hookviz.samples.shown import signal_picture

__all__ = ["signal_or_clip", "sample_of_tensor"]


def signal_or_clip(image, channels: int):
    """``image`` as a (C, L) signal or (C, T, H, W) clip tensor on the CPU, or ``None`` when it is
    no float tensor of those shapes (a photo's, taken by the photo kind).

    Raises:
        UsageError: a 5-D tensor that is not a batch of one clip, or a batch of photos (N, C, H, W).
    """
    import torch

    if not isinstance(image, torch.Tensor) or not image.is_floating_point() or image.numel() == 0:
        return None
    tensor = image.detach().float().cpu()
    if tensor.dim() == 5:
        if tensor.shape[0] != 1:
            raise UsageError(
                f"{arg('image')}: a tensor input must be (C, H, W), a signal's (C, L) or a clip's (C, T, H, W), "
                f"not {tuple(tensor.shape)}; explain one clip at a time"
            )
        tensor = tensor[0]
    if tensor.dim() == 4 and tensor.shape[0] not in (1, channels) and tensor.shape[1] == channels:
        # no clip of the model's channels: a batch of photos, which the model would fail on as a clip
        raise UsageError(
            f"{arg('image', 'x'.join(map(str, tensor.shape)))}: a batch of {tensor.shape[0]} images (N, C, H, W); "
            "explain takes one at a time: pass image[0], image[1], ..."
        )
    batch_of_one_photo = tensor.dim() == 4 and tensor.shape[0] == 1 and tensor.shape[1] == channels
    return tensor if tensor.dim() in (2, 4) and not batch_of_one_photo else None


def sample_of_tensor(tensor, preprocessing: Preprocessing) -> PreparedSample:
    """A (C, L) signal or a (C, T, H, W) clip taken as the model's input as it is. What
    pictures draw it on: the signal as one grey band per channel (its own min to max), the
    clip's frames as they were before normalisation, tiled as its maps are (``anatomy.slices``)."""
    from PIL import Image

    from hookviz.anatomy.slices import tiling

    values = np.nan_to_num(tensor.numpy())
    if tensor.dim() == 2:
        shown = signal_picture(values)
    else:
        channels = tensor.shape[0]
        mean = np.asarray(preprocessing.mean[:channels], dtype=np.float32)[:, None, None, None]
        std = np.asarray(preprocessing.std[:channels], dtype=np.float32)[:, None, None, None]
        frames = (np.clip(values * std + mean, 0, 1) * 255).round().astype(np.uint8).transpose(1, 2, 3, 0)
        frames = np.repeat(frames, 3, axis=3) if channels == 1 else frames[..., :3]
        tiles = tiling(tuple(frames.shape[:3]))
        shown = tiles.flat(frames[list(tiles.indices)], np.uint8(140))
    noun = "signal" if tensor.dim() == 2 else "clip"
    return PreparedSample(LoadedSample(None, Image.fromarray(np.ascontiguousarray(shown)), noun=noun), tensor, shown)
