"""Which modules compile mode leaves to Inductor: a committed table of H200 measurements.

``inductor_table.json`` (written by ``benchmarks/compile_table_gpu.py``, never by hand) holds, per
kernel, the median forward+backward time of a compiled model whose only swap is that kernel (through
``ligerkit.compile.ops``) and of the same model with no swap (Inductor's own fusion of the original
module). Where Inductor's time is lower by more than the table's noise margin, the kit in compile mode
leaves that module off and the report says why, with the two figures.
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

TABLE = Path(__file__).with_name("inductor_table.json")
ENV = "LIGERKIT_INDUCTOR_TABLE"  # another table file, or "none" for no table (measurements use it)


def table_path() -> Path | None:
    """The table in effect: ``$LIGERKIT_INDUCTOR_TABLE`` when set (``none``: no table), else the committed one."""
    value = os.environ.get(ENV)
    if value is None:
        return TABLE
    return None if value.strip().lower() == "none" else Path(value)


@lru_cache(maxsize=4)
def _read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def load() -> dict[str, Any]:
    """The table in effect (empty ``kernels`` when there is none)."""
    path = table_path()
    if path is None or not path.is_file():
        return {"kernels": {}}
    return _read(path)


def left_to_inductor(table: dict[str, Any] | None = None) -> dict[str, str]:
    """``{kernel: reason}`` for every kernel Inductor ran faster than Liger's in the table."""
    table = load() if table is None else table
    margin = float(table.get("margin", 0.0))
    where = ", ".join(str(table[k]) for k in ("device", "measured") if table.get(k))
    out: dict[str, str] = {}
    for kernel, row in table.get("kernels", {}).items():
        liger, inductor = float(row["liger_ms"]), float(row["inductor_ms"])
        if inductor < liger * (1.0 - margin):
            out[kernel] = (f"compile mode leaves it to Inductor: {inductor:.2f} ms vs {liger:.2f} ms with Liger's "
                           f"kernel per forward+backward ({row.get('model', 'model')}{'; ' + where if where else ''}; "
                           "ligerkit/compile/inductor_table.json)")
    return out
