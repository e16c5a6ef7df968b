"""What a refused checkpoint raises: one family, each message naming the file and what to do.

Both classes live in :mod:`ligerkit.errors` with every other error; this module re-exports them so the
imports written against it keep working (neither place imports PyTorch Distributed Checkpoint, which is
slow to import, so the run folder, the manifest and the random streams stay light).
"""

from __future__ import annotations

from ligerkit.errors import CheckpointError, CheckpointFileError  # noqa: F401 (re-exported)
