"""Which files a run takes: never its own output, nor hidden folders below what was named."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from hookviz.errors import UsageError
from hookviz.inputs.discovery import OUTPUT_MARKER, find_images, is_output_folder

from .cli_helpers import hookviz_cli, hookviz_run

TINY = ["--model", "tests.conftest:tiny_net", "--weights", "none", "--layer", "features.3"]


def _photos(folder, *names):
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        Image.new("RGB", (24, 16), (200, 40, 40)).save(folder / name)


@pytest.mark.slow
def test_running_twice_in_a_folder_of_photos_explains_the_photos_only(tmp_path, monkeypatch):
    _photos(tmp_path, "a.png", "b.png")
    monkeypatch.chdir(tmp_path)
    for _ in range(2):
        result = hookviz_run(".", layer="features.3")
        assert result.exit_code == 0, result.output
        document = json.loads((tmp_path / "hookviz-out" / "run.json").read_text())
        assert sorted(entry["output"] for entry in document["images"]) == ["a", "b"]
    assert sorted(p.name for p in (tmp_path / "hookviz-out").iterdir() if p.is_dir()) == ["a", "b"]


@pytest.mark.slow
def test_out_inside_the_image_folder_and_older_runs_are_never_read(tmp_path):
    _photos(tmp_path / "photos", "a.png")
    first = hookviz_run(tmp_path / "photos", layer="features.3", out=tmp_path / "photos" / "results")
    assert first.exit_code == 0, first.output
    # A second run with another --out must not read the first run's pictures either.
    second = hookviz_run(tmp_path / "photos", layer="features.3", out=tmp_path / "photos" / "again")
    assert second.exit_code == 0, second.output
    document = json.loads((tmp_path / "photos" / "again" / "run.json").read_text())
    assert [entry["output"] for entry in document["images"]] == ["a"]
    assert is_output_folder(tmp_path / "photos" / "results")


def test_hidden_folders_are_skipped_unless_named(tmp_path):
    _photos(tmp_path, "a.png")
    _photos(tmp_path / ".venv" / "share" / "icons", "python.png")
    _photos(tmp_path / "sub", ".thumbnail.png", "b.png")
    assert [p.name for p in find_images([str(tmp_path)])] == ["a.png", "b.png"]
    assert [p.name for p in find_images([str(tmp_path / ".venv")])] == ["python.png"]
    assert [p.name for p in find_images([str(tmp_path / "**" / "*.png")])] == ["a.png", "b.png"]


def test_a_run_marks_its_output_while_it_runs(tmp_path):
    _photos(tmp_path / "photos", "a.png")
    (tmp_path / "photos" / "in-progress").mkdir()
    (tmp_path / "photos" / "in-progress" / OUTPUT_MARKER).touch()
    _photos(tmp_path / "photos" / "in-progress" / "a", "a.summary.png")
    assert [p.name for p in find_images([str(tmp_path / "photos")])] == ["a.png"]
    with pytest.raises(UsageError, match="output folder"):
        find_images([str(tmp_path / "photos" / "in-progress")])
    with pytest.raises(UsageError, match="is the folder of the photos to explain"):
        find_images([str(tmp_path / "photos")], exclude=[tmp_path / "photos"])


def test_an_out_that_is_or_holds_the_photos_folder_is_named_as_the_fault(tmp_path, monkeypatch):
    _photos(tmp_path / "photos" / "sub", "a.png")
    monkeypatch.chdir(tmp_path)
    sub = tmp_path / "photos" / "sub"
    for args, message in [
        (["photos", "-o", "photos"], "--out photos: is the folder of the photos to explain; choose another --out"),
        (
            ["photos/sub", "--out", "photos"],
            "--out photos: holds photos/sub, a folder of the photos to explain; choose another --out",
        ),
        (["photos/sub/", "--out", str(sub)], f"--out {sub}: is the folder of the photos to explain; choose another --out"),
    ]:
        result = hookviz_cli("run", *args, *TINY)
        assert result.exit_code == 2, result.output
        assert result.stderr.strip() == f"hookviz: error: {message}", result.stderr
    # A folder of an earlier run is still called what it is.
    (sub / OUTPUT_MARKER).touch()
    with pytest.raises(UsageError, match=r"sub: is a hookviz output folder; name the photos' folder instead"):
        find_images([str(sub)], exclude=[tmp_path / "out"])


@pytest.mark.parametrize(
    "images, out, shown",
    [
        (["photos/a.png", "photos/b.png"], "photos", "photos/a.png"),  # the shell expanded photos/*.png
        (["photos/*.png"], "photos", "photos/a.png"),  # a quoted pattern
        (["photos/b.png"], ".", "photos/b.png"),  # a folder above the photos
    ],
)
def test_an_out_that_holds_a_photo_named_is_refused_and_left_untouched(tmp_path, monkeypatch, images, out, shown):
    """A run marks its --out as output, and a later run over the parent would skip the photos there."""
    _photos(tmp_path / "photos", "a.png", "b.png")
    monkeypatch.chdir(tmp_path)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    result = hookviz_cli("run", *images, *TINY, "--out", out)
    assert result.exit_code == 2, result.output
    suggestion = "hookviz-out" if out == "." else f"{out}/hookviz-out"
    assert result.stderr.strip() == (
        f"hookviz: error: --out {out}: holds {shown}, a photo to explain; later runs skip a run's output folder, "
        f"so its photos would be left out: choose another --out, such as {suggestion}"
    )
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


@pytest.mark.slow
def test_an_out_inside_the_photos_folder_leaves_every_later_run_the_photos(tmp_path, monkeypatch):
    _photos(tmp_path / "photos", "a.png", "b.png")
    monkeypatch.chdir(tmp_path)
    for source in ("photos", "photos/a.png"):  # a folder, then files named outright
        result = hookviz_run(source, layer="features.3", out="photos/out")
        assert result.exit_code == 0, result.output
    assert is_output_folder(tmp_path / "photos" / "out") and not is_output_folder(tmp_path / "photos")
    notes: list[str] = []
    # over the parent, later: the photos, never the first runs' pictures, and nothing said
    assert [p.name for p in find_images(["."], exclude=[tmp_path / "other"], notes=notes)] == ["a.png", "b.png"]
    assert notes == []


def test_an_output_folder_that_holds_photos_at_its_top_is_skipped_with_a_note(tmp_path):
    """An earlier hookviz let a run's --out be the photos' folder: its photos are not skipped in silence."""
    _photos(tmp_path / "photos", "a.png", "b.png")
    (tmp_path / "photos" / OUTPUT_MARKER).touch()
    _photos(tmp_path / "photos" / "a", "input.jpg")  # a run's own picture, in its image's folder
    _photos(tmp_path / "other", "c.png")
    notes: list[str] = []
    assert [p.name for p in find_images([str(tmp_path)], notes=notes)] == ["c.png"]
    assert notes == [
        f"{tmp_path / 'photos'}: skipped as a hookviz output folder (it holds {OUTPUT_MARKER} or a run.json), though "
        "2 image files lie at its top, where a run writes none; name the files themselves to explain them"
    ]


def test_an_out_that_is_a_folder_of_other_photos_is_refused_and_left_unmarked(photo, tmp_path):
    """It was accepted and marked an output folder, so that a later run over it said "is a
    hookviz output folder; name the photos' folder instead" of the photos' own folder."""

    album = tmp_path / "album"
    album.mkdir()
    for name in ("a.png", "b.jpg"):
        (album / name).write_bytes(photo.read_bytes())
    result = hookviz_run(photo, weights=None, out=album)
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines() == [
        f"hookviz: error: --out {album}: holds photos (a.png, b.jpg) and is no hookviz output folder; a run would make "
        f"it one, which later runs skip: choose an empty or new folder, such as {album / 'hookviz-out'}"
    ]
    assert sorted(p.name for p in album.iterdir()) == ["a.png", "b.jpg"]


def test_the_common_suffixes_are_known_without_loading_every_format_of_pil():
    """A photo's suffix is looked up in what ``Image.preinit`` registers before every format PIL
    has is loaded; loading them all changes none of those (else a folder's photos would depend
    on what was loaded first), and a .png folder loads none (~25 ms of a run's start)."""
    import subprocess
    import sys

    code = (
        "from PIL import Image; Image.preinit(); first = dict(Image.EXTENSION)\n"
        "from hookviz.inputs.discovery import IMAGE_SUFFIXES\n"
        "print('.png' in IMAGE_SUFFIXES and '.JPG' in IMAGE_SUFFIXES, len(Image.EXTENSION) == len(first))\n"
        "print('.txt' not in IMAGE_SUFFIXES, len(Image.EXTENSION) > len(first))  # '.txt' loaded them all\n"
        "print(all(Image.EXTENSION[k] == v for k, v in first.items()), len(first) >= 5)\n"
    )
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert shown.split() == ["True"] * 6


@pytest.mark.parametrize("command", ["run", "atlas"])
def test_an_empty_image_argument_is_refused_not_read_as_the_working_folder(command, tmp_path, monkeypatch):
    """``hookviz run "$PHOTO"`` with the variable unset gave an empty argument, which a path reads
    as the working folder: the run explained every photo below it."""
    _photos(tmp_path, "a.png")
    monkeypatch.chdir(tmp_path)
    result = hookviz_cli(command, "", *TINY, "--out", "out")
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == (
        "hookviz: error: an empty image argument (''): give an image file, a folder (. for this one) or a pattern"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.png"]


def test_a_link_to_itself_among_the_photos_fails_alone(tmp_path):
    """``ln -s loop.png loop.png`` in a folder of photos ended the whole run at once in
    "RuntimeError: Symlink loop" (Path.resolve raises it): it is one photo that cannot be read."""
    _photos(tmp_path / "photos", "a.png")
    (tmp_path / "photos" / "loop.png").symlink_to("loop.png")
    result = hookviz_run(tmp_path / "photos", "--pictures", "none", layer="features.3", out=tmp_path / "out")
    assert result.exit_code == 1, result.output
    failed = [line for line in result.stderr.splitlines() if line.startswith("hookviz: failed:")]
    assert failed == [f"hookviz: failed: {tmp_path / 'photos' / 'loop.png'}: no such file"], result.stderr
    document = json.loads((tmp_path / "out" / "run.json").read_text())
    assert document["counts"]["done"] == 1 and (tmp_path / "out" / "a" / "report.json").is_file()
