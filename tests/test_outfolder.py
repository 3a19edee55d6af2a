"""The output folder before a run writes there: one run at a time, the shards of one run together."""

from __future__ import annotations

import pytest

from hookviz.errors import OutputError
from hookviz.store.outfolder import FolderLock


def test_a_folder_is_held_by_one_run_or_by_the_shards_of_one_run(tmp_path):
    whole, other = FolderLock(tmp_path), FolderLock(tmp_path)
    assert whole.acquire()
    with pytest.raises(OutputError, match=r"another hookviz run is writing into this folder now; wait for it"):
        other.acquire()
    with pytest.raises(OutputError, match=r"another hookviz run \(without shard\) is writing"):
        FolderLock(tmp_path, (1, 2)).acquire()
    whole.release()
    first, second = FolderLock(tmp_path, (1, 2)), FolderLock(tmp_path, (2, 2))
    assert first.acquire() and second.acquire()  # side by side
    with pytest.raises(OutputError, match="another run of shard 1/2"):
        FolderLock(tmp_path, (1, 2)).acquire()
    with pytest.raises(OutputError, match="a shard of another hookviz run"):
        other.acquire()
    first.release()
    second.release()
    assert other.acquire()  # nothing left behind
    other.release()


def test_checking_early_creates_nothing(tmp_path):
    assert not FolderLock(tmp_path).acquire(create=False)
    assert list(tmp_path.iterdir()) == []
