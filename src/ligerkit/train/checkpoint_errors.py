"""What a refused checkpoint raises: one family, each message naming the file and what to do.

Its own module so the light parts (the run folder, the manifest, the random streams) raise these
without importing PyTorch Distributed Checkpoint, which is slow to import.
"""

from __future__ import annotations

from pathlib import Path

from ligerkit.errors import LigerKitError


class CheckpointError(LigerKitError):
    """No usable checkpoint where one was expected, or a checkpoint that cannot be read."""

    def __init__(self, message: str, file: Path | None = None):
        super().__init__(message)
        self.file = file


class CheckpointFileError(CheckpointError):
    """One file of a checkpoint is damaged, missing, or not plain data (a pickle that asks for code)."""

    def __init__(self, file: Path, reason: str):
        super().__init__(f"{file}: {reason}", file)
        self.file: Path = file
        self.reason = reason
