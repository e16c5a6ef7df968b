"""Qwen3 recipe engine: the official route, nothing to add.

The family comes from the config (``model.family: qwen3``); Liger's own helper decides the
module defaults (``modules: auto``), the kit keeps the loss kernels off.
"""

from ligerkit.engine import Engine


class Qwen3Engine(Engine):
    """Official route: the base engine already calls ``kit.apply(model_family="qwen3")``."""
