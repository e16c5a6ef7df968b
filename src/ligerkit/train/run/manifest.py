"""What a checkpoint holds: every file's size and SHA-256, written at save and checked before a resume.

The manifest is the ``files`` entry of the checkpoint's ``meta.json``: ``{name: {"size": bytes, "sha256":
hex}}`` for every file in the folder but ``meta.json`` itself. Sizes catch a file cut short, hashes a
flipped bit. SHA-256 runs at about 1.6 GB/s on one core (SHA extensions; CRC32 is only ~2.5x faster, and
blake2b is slower here), and the work is shared: at save each rank hashes a share of the files after
every rank has written its own, rank 0 gathers the shares; at resume each rank checks a share again.
A multi-GB checkpoint costs seconds.

Checksums in a folder anyone may write catch damage, not an attacker, who could rewrite them too: the
loaders are restricted for that (``safe_load.py``).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ligerkit.errors import CheckpointError, CheckpointFileError

META = "meta.json"
_PART = ".manifest_rank{rank}.json"
_CHUNK = 8 * 2**20


def sha256(path: Path) -> str:
    """The SHA-256 of a file, read in 8 MiB chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def share(sizes: dict[str, int], rank: int, world_size: int) -> list[str]:
    """The names ``rank`` hashes: largest first, dealt round-robin, so every rank gets a like amount."""
    ordered = sorted(sizes, key=lambda name: (-sizes[name], name))
    return ordered[rank::world_size]


def _listed(folder: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in folder.iterdir()
            if p.is_file() and p.name != META and not (p.name.startswith(".manifest_rank") and p.suffix == ".json")}


def write_share(folder: Path, rank: int, world_size: int) -> None:
    """Hash this rank's share of ``folder`` (every rank has written its files) into a part for rank 0."""
    sizes = _listed(folder)
    part = {name: {"size": sizes[name], "sha256": sha256(folder / name)} for name in share(sizes, rank, world_size)}
    (folder / _PART.format(rank=rank)).write_text(json.dumps(part))


def gather(folder: Path, world_size: int) -> dict[str, dict[str, int | str]]:
    """The whole manifest from every rank's part (rank 0, after every rank wrote its part); the parts go."""
    files: dict[str, dict[str, int | str]] = {}
    parts = [folder / _PART.format(rank=rank) for rank in range(world_size)]
    for part in parts:
        files.update(json.loads(part.read_text()))
    missing = sorted(_listed(folder).keys() - files.keys())
    if missing:
        raise CheckpointError(f"saving {folder}: no rank hashed {missing}; the save is left as .partial (never "
                              "resumed from); report this as a bug")
    for part in parts:
        part.unlink()
    return files


def _entry_ok(name: object, entry: object) -> bool:
    return (isinstance(name, str) and Path(name).name == name and name not in ("", ".", "..", META)
            and isinstance(entry, dict) and isinstance(entry.get("size"), int) and isinstance(entry.get("sha256"), str))


def check(folder: Path, files: object, rank: int, world_size: int) -> None:
    """Every file of the manifest ``files`` is in ``folder`` with its size; this rank's share hashes as
    written. :class:`CheckpointFileError` names the first file that does not."""
    if not isinstance(files, dict) or not all(_entry_ok(name, entry) for name, entry in files.items()):
        raise CheckpointFileError(folder / META, "its 'files' manifest is malformed")
    sizes: dict[str, int] = {}
    for name, entry in sorted(files.items()):
        path = folder / name
        if not path.is_file():
            raise CheckpointFileError(path, "is missing (the manifest lists it)")
        sizes[name] = path.stat().st_size
        if sizes[name] != entry["size"]:
            raise CheckpointFileError(path, f"has {sizes[name]} bytes, the manifest says {entry['size']} (cut short "
                                            "or overwritten)")
    for name in share(sizes, rank, world_size):
        if sha256(folder / name) != files[name]["sha256"]:
            raise CheckpointFileError(folder / name, "does not match its SHA-256 in the manifest (damaged)")
