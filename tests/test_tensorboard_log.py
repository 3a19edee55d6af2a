"""--tensorboard: pictures, scalars and histograms, checked by reading the event file back."""

from __future__ import annotations

import builtins

import pytest

from .cli_helpers import hookviz_run


@pytest.mark.slow  # over 1.4 s of CPU, measured
def test_run_logs_images_scalars_and_histograms(tmp_path, photo):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    second = tmp_path / "second.png"
    second.write_bytes(photo.read_bytes())
    logdir = tmp_path / "tb"
    result = hookviz_run([photo, second], "--tensorboard", logdir, "-q", layer="features.3", out=tmp_path / "out")
    assert result.exit_code == 0, result.output
    events = EventAccumulator(str(logdir), size_guidance={"images": 0, "scalars": 0, "histograms": 0})
    events.Reload()
    tags = events.Tags()
    assert {"features.3/summary", "features.3/channels", "features.3/cam"} <= set(tags["images"])
    assert "features.3/output/mean" in tags["scalars"] and "target/probability" in tags["scalars"]
    assert {"features.3/output", "features.3/grad_output"} <= set(tags["histograms"])
    steps = [event.step for event in events.Images("features.3/cam")]
    assert steps == [0, 1]
    image = events.Images("features.3/summary")[0]
    assert image.width > 500 and image.height > 300
    means = [event.value for event in events.Scalars("features.3/output/mean")]
    assert len(means) == 2 and means[0] == pytest.approx(means[1])


def test_without_tensorboard_the_option_says_how_to_install_it(tmp_path, photo, monkeypatch):
    real_import = builtins.__import__

    def no_tensorboard(name, *args, **kwargs):
        if name == "tensorboard" or name.startswith("tensorboard.") or name == "torch.utils.tensorboard":
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tensorboard)
    result = hookviz_run(photo, "--tensorboard", tmp_path / "tb", out=tmp_path / "out")
    assert result.exit_code == 2
    assert "pip install 'hookviz[tensorboard]'" in result.stderr
