"""A file ligerkit writes is whole or as it was: whatever stops the write leaves no piece and no file beside."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from ligerkit.whole_files import write_whole


def _beside(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.mark.parametrize("durable", [False, True])
def test_the_new_text_replaces_the_old_whole(tmp_path, durable):
    file = tmp_path / "status.json"
    file.write_text("old\n")
    write_whole(file, "new\n", durable=durable)
    assert file.read_text() == "new\n" and _beside(tmp_path) == ["status.json"]


@pytest.mark.parametrize("stop", [KeyboardInterrupt(), OSError(errno.ENOSPC, "No space left on device")],
                         ids=["interrupt", "full disk"])
@pytest.mark.parametrize("durable", [False, True])
def test_a_write_stopped_halfway_leaves_the_old_file_and_nothing_beside(tmp_path, monkeypatch, stop, durable):
    file = tmp_path / "run.json"
    file.write_text("old\n")
    real_write = Path.write_text

    def halfway(self, text):  # half the text reaches the file beside, then the write stops
        real_write(self, text[: len(text) // 2])
        raise stop

    def stopped_fsync(fd):  # the text is in the file beside, not yet on disk, when the write stops
        raise stop

    if durable:
        monkeypatch.setattr(os, "fsync", stopped_fsync)
    else:
        monkeypatch.setattr(Path, "write_text", halfway)
    with pytest.raises(type(stop)):
        write_whole(file, "new text, longer than the old\n", durable=durable)
    assert file.read_text() == "old\n" and _beside(tmp_path) == ["run.json"]


def test_a_missing_folder_is_raised_not_swallowed(tmp_path):
    with pytest.raises(FileNotFoundError):
        write_whole(tmp_path / "nowhere" / "status.json", "{}\n")
    assert _beside(tmp_path) == []


def test_the_file_beside_is_named_after_the_file_and_this_process(tmp_path, monkeypatch):
    seen = []
    real_replace = os.replace

    def watch(source, target):
        seen.append(Path(source).name)
        real_replace(source, target)

    monkeypatch.setattr(os, "replace", watch)
    write_whole(tmp_path / "cache.json", "{}")
    assert seen == [f".cache.json.{os.getpid()}.tmp"]  # two processes writing one file never share it
