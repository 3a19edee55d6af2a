"""A folder holding video files and photos, given to a model that takes clips (issue 28: "a
folder of photos stays a folder of photos unless the model takes clips"): it is a folder of
videos, each video a clip; its photos are left out with one note (never read as a clip of
frames beside the videos, nor dropped silently); a folder of photos alone is still one clip,
and a photo model still takes every photo."""

from __future__ import annotations

import pytest
from PIL import Image

from hookviz.samples import get_sample_kind

from .video_clips import encode, moving_square

pytest.importorskip("av")


def _photos(folder, count):
    folder.mkdir(parents=True, exist_ok=True)
    for index in range(count):
        Image.fromarray(moving_square(index)).save(folder / f"p{index}.png")


def test_a_folder_of_videos_and_photos_gives_its_videos_and_notes_its_photos(tmp_path):
    top = tmp_path / "mixed"
    _photos(top, 3)
    encode(top / "walk.mp4", frames=8)
    _photos(top / "jump", 4)  # a folder of photos alone below it: a clip of frames
    kind, notes = get_sample_kind("video"), []
    assert kind.find([str(top)], notes=notes) == [top / "jump", top / "walk.mp4"]
    assert len(notes) == 1 and "holds videos and 3 photos" in notes[0] and "left out" in notes[0] and "\n" not in notes[0]
    notes.clear()
    assert kind.find([str(top / "jump")], notes=notes) == [top / "jump"] and notes == []  # photos alone: one clip
    photos = get_sample_kind("photo").find([str(top)])
    assert sorted(p.name for p in photos) == ["p0.png", "p0.png", "p1.png", "p1.png", "p2.png", "p2.png", "p3.png"]
