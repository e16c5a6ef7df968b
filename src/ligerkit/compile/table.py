"""Which modules compile mode leaves to Inductor: a committed table of H200 measurements.

``inductor_table.json`` (written by ``benchmarks/compile_table_gpu.py``, never by hand) holds, per
kernel, the median forward+backward time of a compiled model whose only swap is that kernel (through
``ligerkit.compile.ops``) and of the same model with no swap (Inductor's own fusion of the original
module). Where Inductor's time is lower by more than the table's noise margin, the kit in compile mode
leaves that module off and the report says why, with the two figures.

Which one is faster can depend on the model's width, so a kernel may hold one row per measured width
(``"width"``: the hidden size; a lone row without one holds at every width). The caller that knows
the model's width says so for the block (:func:`for_width`: the trainer's set-up, ``load_model``), and
the row measured nearest to it (on a log scale) decides. Without a width, a kernel is left to Inductor
only where every row says Inductor wins.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
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


_WIDTH: ContextVar[int | None] = ContextVar("ligerkit_compile_width", default=None)


@contextmanager
def for_width(width: int | None) -> Iterator[None]:
    """In the block, compile mode picks each kernel's row measured nearest to ``width`` (the model's
    hidden size; ``None``: unknown)."""
    token = _WIDTH.set(width if isinstance(width, int) and width > 0 else None)
    try:
        yield
    finally:
        _WIDTH.reset(token)


def _rows(entry: Any) -> list[dict[str, Any]]:
    return [entry] if isinstance(entry, dict) else list(entry)


def _nearest(rows: list[dict[str, Any]], width: int) -> dict[str, Any]:
    sized = [r for r in rows if isinstance(r.get("width"), int) and r["width"] > 0]
    if not sized:
        return rows[0]
    return min(sized, key=lambda r: (abs(math.log(r["width"] / width)), -r["width"]))


def _wins(row: dict[str, Any], margin: float) -> bool:
    return float(row["inductor_ms"]) < float(row["liger_ms"]) * (1.0 - margin)


def left_to_inductor(table: dict[str, Any] | None = None, width: int | None = None) -> dict[str, str]:
    """``{kernel: reason}`` for every kernel Inductor ran faster than Liger's in the table: in the row
    measured nearest to ``width`` (default: the width of an enclosing :func:`for_width`), or in every
    row when the width is unknown."""
    table = load() if table is None else table
    width = width if width is not None else _WIDTH.get()
    margin = float(table.get("margin", 0.0))
    out: dict[str, str] = {}
    for kernel, entry in table.get("kernels", {}).items():
        rows = _rows(entry)
        if not rows:
            continue
        chosen = [_nearest(rows, width)] if width is not None else rows
        if not all(_wins(row, margin) for row in chosen):
            continue
        row = chosen[0]
        where = ", ".join(str(row.get(k) or table[k]) for k in ("device", "measured") if row.get(k) or table.get(k))
        at = f", measured at width {row['width']}" if "width" in row else ""
        at += f" (the nearest to this model's {width})" if width is not None and "width" in row else ""
        out[kernel] = (f"compile mode leaves it to Inductor: {float(row['inductor_ms']):.2f} ms vs "
                       f"{float(row['liger_ms']):.2f} ms with Liger's kernel per forward+backward "
                       f"({row.get('model', 'model')}{at}{'; ' + where if where else ''}; "
                       "ligerkit/compile/inductor_table.json)")
    return out
