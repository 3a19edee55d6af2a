"""Bindings that used to pick silently (issue 37): a CSV whose rows ``a.png`` and ``a`` both name
sample ``a`` (the later one won), and an input's folder holding two files for one sample
(``a.npy`` beside ``a.pt``: the first by sorted name won; ``A.npy`` beside ``a.npy``: one left out).
Each stops the run in one line naming both."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hookviz.errors import ImageError
from hookviz.samples.multi_files import partner
from hookviz.tasks.segment import Segment

from .cli_helpers import hookviz_run
from .test_mistakes_refused_in_one_line import META, RGBD, _one_line, _photos


def test_a_csv_with_rows_a_png_and_a_for_one_sample_stops_the_run_naming_both(tmp_path):
    table = tmp_path / "meta.csv"
    table.write_text("file,x,y,z\na.png,1,2,3\nb.png,4,5,6\na,7,8,9\n")
    result = hookviz_run(_photos(tmp_path / "rgb"), "-q", "--input", f"meta={table}", model=META, out=tmp_path / "out")
    _one_line(result, "meta.csv", "two rows for a.png", "'a.png'", "'a'")
    assert not (tmp_path / "out").exists()


def _depths(folder, names):
    folder.mkdir()
    rng = np.random.default_rng(1)
    for name in names:
        values = rng.random((20, 24)).astype(np.float32)
        if name.endswith(".pt"):
            torch.save(torch.from_numpy(values), folder / name)
        else:
            np.save(folder / name, values)
    return folder


@pytest.mark.parametrize(
    "names, both",
    [(("a.npy", "a.pt", "b.npy"), ("a.npy", "a.pt")), (("A.npy", "a.npy", "b.npy"), ("A.npy", "a.npy"))],
)
def test_two_files_of_an_input_for_one_sample_stop_the_run_naming_both(tmp_path, names, both):
    depth = _depths(tmp_path / "depth", names)
    result = hookviz_run(_photos(tmp_path / "rgb"), "-q", "--input", f"depth={depth}", "--aligned", "depth", "--task", Segment.name,
                         model=RGBD, out=tmp_path / "out")  # fmt: skip
    _one_line(result, "--input depth=", *(f"depth/{name}" for name in both), "keep one")
    assert not (tmp_path / "out").exists()


def test_partner_refuses_two_files_for_one_sample(tmp_path):
    depth = _depths(tmp_path / "depth", ("a.npy", "a.pt"))
    with pytest.raises(ImageError, match=r"depth/a\.npy and .*depth/a\.pt: two files for the sample a; keep one"):
        partner((depth,), "a")


def test_photos_and_their_depth_maps_in_one_folder_still_pair(tmp_path):
    """The photo itself is not a second file of its sample's depth: ``a.png`` pairs with ``a.npy`` beside it."""
    data = _photos(tmp_path / "data")
    for name in ("a", "b"):
        np.save(data / f"{name}.npy", np.zeros((20, 24), np.float32))
    result = hookviz_run(data, "-q", "--input", f"depth={data}", "--aligned", "depth", "--task", Segment.name,
                         "--resize", 32, "--pictures", "none", model=RGBD, out=tmp_path / "out")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "a" / "report.json").read_text().count("data/a.npy") >= 1
