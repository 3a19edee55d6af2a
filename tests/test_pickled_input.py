"""A pickled ``.pt`` given as an input is refused, nothing in it runs, and the refusal is one line
(issue 37): it used to paste torch's whole weights-only explanation, many lines long."""

from __future__ import annotations

import numpy as np
import torch

from hookviz.tasks.segment import Segment

from .cli_helpers import hookviz_run
from .test_mistakes_refused_in_one_line import RGBD, _photos


class _Exploit:
    """Unpickling it would create ``marker``."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_a_pickled_pt_input_is_refused_in_one_line_and_nothing_in_it_runs(tmp_path):
    depth, marker = tmp_path / "depth", tmp_path / "the-pickle-ran"
    depth.mkdir()
    np.save(depth / "a.npy", np.zeros((20, 24), np.float32))
    torch.save({"depth": _Exploit(marker)}, depth / "b.pt")
    result = hookviz_run(_photos(tmp_path / "rgb"), "-q", "--input", f"depth={depth}", "--aligned", "depth",
                         "--task", Segment.name, "--resize", 32, "--pictures", "none", model=RGBD, out=tmp_path / "out")  # fmt: skip
    about = [line for line in result.stderr.splitlines() if "b.pt" in line]
    assert len(about) == 1 and result.exit_code == 1, result.output
    assert "depth/b.pt: input 'depth': holds pickled Python objects" in about[0] and "save the tensor alone" in about[0]
    assert "weights_only" not in result.output and "(1)" not in result.output and len(result.stderr.splitlines()) <= 3
    assert not marker.exists()
