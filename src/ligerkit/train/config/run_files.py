"""The names of the files a run folder holds: one place for the trainer, resume and the config loader.

A leaf module (it imports nothing), so ``ligerkit.train.config.loading``, which the run-folder code
itself imports, can tell a run folder from a config file by the same names.
"""

from __future__ import annotations

import re

CONFIG_FILE = "config.yaml"
"""The resolved config, written at the start (format 1 folders have only this)."""
RUN_RECORD = "run.json"
"""The folder's format and the resolved config, as ``resume`` compares it (format 2)."""
METRICS_FILE = "metrics.jsonl"
"""One JSON row per logged step."""
STATUS_FILE = "status.json"
"""Where the run ended: running (a crash when nothing follows), finished, stopped or failed (``run.status``)."""
CHECKPOINTS_FOLDER = "checkpoints"
"""The folder of the run's checkpoints, one ``step_N`` folder each (``step_N.partial`` while one is written)."""
CHECKPOINT_NAME = re.compile(r"step_(\d+)")
"""A complete checkpoint's folder name (``fullmatch``; its group is the step)."""
