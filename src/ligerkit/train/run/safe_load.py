"""Reading a checkpoint as data, never as code: whatever sits in a run folder, no file can run anything.

A pickle may name any importable callable and have the loader call it, so a crafted file in a run
folder would run code the moment it is unpickled. PyTorch Distributed Checkpoint (DCP) unpickles twice
without a restriction: its ``.metadata`` file with plain :mod:`pickle`, and every non-tensor entry of a
``.distcp`` file (the optimizer's ``param_groups``, say) with ``torch.load(weights_only=False)`` in
its default load planner. Here both are replaced, so the loaders themselves are restricted:

- ``.metadata`` goes through an unpickler that resolves only :data:`ALLOWED` (DCP's metadata records,
  ``torch.Size``, dtypes and layouts, ``pathlib`` paths) and refuses any other name it is asked for;
- a non-tensor entry is read with ``torch.load(weights_only=True)``: tensors, numbers, strings and
  containers of them. DCP already reads tensor entries that way.

Checksums (``manifest.py``) catch damage; they cannot stop someone who may write the folder, as they
could rewrite the checksums too. What stops them is this module.
"""

from __future__ import annotations

import io
import pickle
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.metadata import BytesStorageMetadata, Metadata, StorageMeta

from ligerkit.errors import CheckpointError, CheckpointFileError

METADATA = ".metadata"

_DCP = "torch.distributed.checkpoint.metadata"
ALLOWED: frozenset[tuple[str, str]] = frozenset({
    (_DCP, "Metadata"), (_DCP, "StorageMeta"), (_DCP, "MetadataIndex"), (_DCP, "TensorStorageMetadata"),
    (_DCP, "BytesStorageMetadata"), (_DCP, "ChunkStorageMetadata"), (_DCP, "TensorProperties"),
    (_DCP, "_MEM_FORMAT_ENCODING"), ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch", "Size"), ("torch.serialization", "_get_layout"), ("collections", "OrderedDict"),
    ("pathlib", "PosixPath"), ("pathlib", "PurePosixPath"), ("pathlib._local", "PosixPath"),
})
"""What a DCP ``.metadata`` file may name, besides torch's dtypes (``torch.float32``, ...)."""
_DTYPES = frozenset(name for name, value in vars(torch).items() if isinstance(value, torch.dtype))


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in ALLOWED and not (module == "torch" and name in _DTYPES):
            raise pickle.UnpicklingError(f"it asks for {module}.{name}, which DCP metadata never holds")
        return super().find_class(module, name)


def read_metadata(path: Path) -> Metadata:
    """A DCP ``.metadata`` file, unpickled with only :data:`ALLOWED` names; :class:`CheckpointFileError`
    when it is missing, damaged or names anything else."""
    try:
        with path.open("rb") as fh:
            metadata = _MetadataUnpickler(fh).load()
    except FileNotFoundError:
        raise CheckpointFileError(path, "is missing") from None
    except OSError as exc:
        raise CheckpointFileError(path, f"cannot be read ({exc})") from exc
    except Exception as exc:  # every way a restricted unpickle of foreign bytes can fail
        raise CheckpointFileError(path, f"is not DCP metadata ({type(exc).__name__}: {exc})") from exc
    if not (isinstance(metadata, Metadata) and isinstance(metadata.storage_data, dict)
            and isinstance(metadata.state_dict_metadata, dict)):
        raise CheckpointFileError(path, f"holds a {type(metadata).__name__} that is not DCP metadata")
    return metadata


def load_plain(data: bytes | io.BytesIO, where: Path, what: str) -> Any:
    """A ``torch.save`` stream read with ``weights_only=True`` (tensors, numbers, strings, containers);
    :class:`CheckpointFileError` naming ``where`` and the entry ``what`` otherwise."""
    stream = io.BytesIO(data) if isinstance(data, bytes) else data
    try:
        return torch.load(stream, map_location="cpu", weights_only=True)
    except Exception as exc:  # UnpicklingError for a refused name; anything for damaged bytes
        raise CheckpointFileError(where, f"{what} is not plain data ({type(exc).__name__}: {exc})") from exc


def check_storage(folder: Path, metadata: Metadata) -> None:
    """Every entry ``metadata`` points to lies inside a file of ``folder``, and every non-tensor entry
    reads as plain data (:func:`load_plain`); :class:`CheckpointFileError` names the first that does not."""
    sizes: dict[str, int] = {}
    plain = {fqn for fqn, kind in metadata.state_dict_metadata.items() if isinstance(kind, BytesStorageMetadata)}
    for index, info in metadata.storage_data.items():
        fqn, name = getattr(index, "fqn", None), getattr(info, "relative_path", None)
        if not isinstance(name, str) or Path(name).name != name or name in ("", ".", ".."):
            raise CheckpointFileError(folder / METADATA, f"names a data file {name!r} outside the checkpoint")
        if name not in sizes:
            if not (folder / name).is_file():
                raise CheckpointFileError(folder / name, "is missing (the checkpoint's metadata names it)")
            sizes[name] = (folder / name).stat().st_size
        offset, length = getattr(info, "offset", None), getattr(info, "length", None)
        if not (type(offset) is int and type(length) is int and 0 <= offset and 0 <= length
                and offset + length <= sizes[name]):
            raise CheckpointFileError(folder / name, f"ends before entry {fqn} (cut short?)")
        if fqn in plain:
            if getattr(info, "transform_descriptors", None):
                raise CheckpointFileError(folder / name, f"entry {fqn} is stored transformed, which ligerkit never "
                                                         "writes")
            with (folder / name).open("rb") as fh:
                fh.seek(offset)
                load_plain(fh.read(length), folder / name, f"entry {fqn}")


class RestrictedReader(FileSystemReader):
    """DCP's file-system reader with ``.metadata`` read by :func:`read_metadata` (no rank-local fallback)."""

    refused: CheckpointFileError | None = None  # DCP turns a failed read into an AssertionError: kept here

    def read_metadata(self, *args: Any) -> Metadata:
        """The checkpoint's metadata, through the allow-list."""
        try:
            metadata = read_metadata(Path(self.path) / METADATA)
        except CheckpointFileError as exc:
            self.refused = exc
            raise
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


class RestrictedLoadPlanner(DefaultLoadPlanner):
    """DCP's default load planner with every non-tensor entry read by :func:`load_plain`."""

    def __init__(self, folder: Path):
        super().__init__()
        self.folder = folder

    def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
        """Put one non-tensor entry in place, read as plain data."""
        fqn = read_item.dest_index.fqn
        storage = self.metadata.storage_data if self.metadata is not None else {}
        obj = load_plain(value, self.folder / storage[read_item.storage_index].relative_path, f"entry {fqn}")
        if not self.flatten_state_dict:
            self.state_dict[fqn] = obj
            return
        container: Any = self.original_state_dict
        *parents, last = self.mappings[fqn]  # the keys leading from the nested state dict to this entry
        for key in parents:
            container = container[key]
        container[last] = obj


@contextmanager
def single_process_quiet() -> Iterator[None]:
    """DCP warns at every save and load without a process group that it assumes a single process: that is
    what a one-process run means, so the warning is dropped (every other warning stays)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*torch.distributed is disabled, unavailable or uninitialized",
                                category=UserWarning)
        yield


def load_state(folder: Path, state: dict[str, Any]) -> None:
    """DCP-load ``folder`` into ``state`` in place with the restricted reader and planner; every failure
    is a :class:`CheckpointError` (a file named where one is to blame)."""
    reader = RestrictedReader(folder)
    try:
        with single_process_quiet():
            dcp.load(state, storage_reader=reader, planner=RestrictedLoadPlanner(folder))
    except CheckpointException as exc:  # DCP gathers each rank's failure (a BaseException)
        causes = [failure[0] for failure in exc.failures.values()]
        for cause in [reader.refused, *causes]:
            if isinstance(cause, CheckpointError):
                raise cause from exc
        raise CheckpointError(f"{folder} could not be loaded ({'; '.join(map(repr, causes))}); resume from an "
                              "earlier checkpoint (move this folder aside) or start a new run") from exc
    except CheckpointError:
        raise
    except Exception as exc:
        raise CheckpointError(f"{folder} could not be loaded ({type(exc).__name__}: {exc}); resume from an earlier "
                              "checkpoint (move this folder aside) or start a new run") from exc
