"""tensors.npz of a run of several inputs keeps each input as the model saw it (issue 37): the
main one as ``input``, every other as ``inputs/<NAME>``, so a map can be checked against the
tensors that made it: the model on them gives the logits the run saved."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from .cli_helpers import hookviz_run
from .test_multi_input import HEIGHT, KEYS, META, WIDTH, _meta, _photos, _rgbd_run


@pytest.mark.slow  # hookviz run in this process
def test_tensors_npz_keeps_every_input_as_the_model_saw_it(tmp_path):
    from tests.multi_models import build_meta

    rgb, out = _photos(tmp_path / "rgb", keys=("001", "002")), tmp_path / "out"
    rows = {"001.png": (1, 2, 3), "002.png": (4, -5, 6.5)}
    table = _meta(tmp_path / "meta.csv", rows)
    result = hookviz_run(rgb, "--input", f"meta={table}", "--save-tensors", "--pictures", "none", "--resize", 32,
                         model=META, weights=None, out=out)  # fmt: skip
    assert result.exit_code == 0, result.output
    for key, row in rows.items():
        arrays = np.load(out / key.removesuffix(".png") / "tensors.npz")
        assert arrays["inputs/meta"].tolist() == [list(map(float, row))] and "inputs/rgb" not in arrays
        with torch.no_grad():
            logits = build_meta()(torch.from_numpy(arrays["input"]), torch.from_numpy(arrays["inputs/meta"]))
        np.testing.assert_allclose(logits.numpy(), arrays["logits"], rtol=1e-4, atol=1e-5)


@pytest.mark.slow  # hookviz run in this process
def test_tensors_npz_keeps_an_aligned_depth_map_at_the_photos_size(tmp_path):
    rgb, depth, out = _photos(tmp_path / "rgb"), tmp_path / "depth", tmp_path / "out"
    depth.mkdir()
    for key in KEYS:
        (depth / key).parent.mkdir(parents=True, exist_ok=True)
        np.save(depth / f"{key}.npy", np.full((HEIGHT, WIDTH), 0.25, np.float32))
    assert _rgbd_run(rgb, depth, out, "--save-tensors", "--pictures", "none", layer=("fusion",)).exit_code == 0
    arrays = np.load(out / "001" / "tensors.npz")
    assert arrays["inputs/depth"].shape[-2:] == arrays["input"].shape[-2:] and arrays["input"].shape[-2:] != (HEIGHT, WIDTH)
    np.testing.assert_allclose(arrays["inputs/depth"], 0.25, atol=1e-6)  # resized with the photo, as it is
