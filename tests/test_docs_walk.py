"""Every command block of README.md and docs/integrations.md runs as printed (CPU).

The test reads the fenced blocks of the documents in :data:`DOCS` and runs each command block
exactly as printed: a ``bash``/``sh``/``shell`` block as one bash script (``set -euo pipefail``)
from the repository root, a ``python`` block as a file with this interpreter. Multi-process
commands run as printed too (``torchrun --nproc-per-node 2``, ``accelerate launch ... 2``: two gloo
processes on the CPU). The only things the test adds are the environment's plumbing: this venv's
``bin`` first on ``PATH`` (``python``, ``ligerkit``, ``torchrun``, ``accelerate``), a scratch
``TMPDIR``, a free port for torchrun's rendezvous and, for ``python`` blocks, the repository root on
the import path (as for a reader who runs a snippet from there, where the README imports a recipe's
own encoder from ``recipes/``) and a clean, empty working folder: a block that needs a file the reader
must bring (``path/to/checkpoint``, the placeholder docs/integrations.md uses for the reader's own
checkpoint) is tagged, never helped by a file the test made. The README's python blocks carry no tag:
each runs as printed.

A block that cannot run on a CPU is tagged in the document, on the line right before its fence,
with the reason: ``<!-- not-run: needs a GPU -->`` (a GPU command, ``pip install``, the test command
itself, an outline with placeholders). An untagged block that fails fails this test; a tag without
a reason, or one that is not right before a fence, fails it too, and so does a fence without a
language (a command block could hide in it). Blocks in other languages (``yaml``, ``text``) are
data, not commands, and are not run. The whole walk takes about two minutes on a 2-core CPU.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = (ROOT / "README.md", ROOT / "docs" / "integrations.md")
SHELLS = ("bash", "sh", "shell")
COMMANDS = (*SHELLS, "python")
TIMEOUT_S = 300  # one block; the walk as a whole stays near two minutes on a 2-core CPU

FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)")
TAG = re.compile(r"^\s*<!--\s*not-run:(?P<reason>.*?)-->\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced block of a document: where it starts, its language, its text, and its not-run reason."""

    doc: Path
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    not_run: str | None

    @property
    def name(self) -> str:
        """``README.md:9:bash``: the test id."""
        return f"{self.doc.relative_to(ROOT)}:{self.line}:{self.lang or 'no-language'}"


class DocsError(Exception):
    """A document's blocks or tags cannot be read as the walk expects."""


def blocks(doc: Path) -> list[Block]:
    """The fenced blocks of ``doc``, each with the reason of the ``not-run`` tag right before it.

    Raises :class:`DocsError` for an unclosed fence, a tag without a reason, or a tag that is not
    right before a fence (a tag left behind when its block moved)."""
    lines = doc.read_text().splitlines()
    found: list[Block] = []
    tag: tuple[int, str] | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        opening = FENCE.match(line)
        marked = TAG.match(line)
        if marked:
            if tag is not None:
                raise DocsError(f"{doc.name}:{tag[0]}: a not-run tag must be right before a ``` fence")
            reason = marked["reason"].strip()
            if not reason:
                raise DocsError(f"{doc.name}:{i + 1}: give the reason: <!-- not-run: needs a GPU -->")
            tag = (i + 1, reason)
        elif opening:
            fence, indent = opening["fence"], len(opening["indent"])
            end = next((j for j in range(i + 1, len(lines))
                        if lines[j].strip().startswith(fence) and not lines[j].strip().strip(fence[0])), None)
            if end is None:
                raise DocsError(f"{doc.name}:{i + 1}: the fence opened here is never closed")
            text = "\n".join(_dedent(raw, indent) for raw in lines[i + 1:end])
            found.append(Block(doc, i + 1, opening["lang"].lower(), text + "\n", tag[1] if tag else None))
            tag, i = None, end
        elif line.strip() and tag is not None:
            raise DocsError(f"{doc.name}:{tag[0]}: a not-run tag must be right before a ``` fence, "
                            f"not before {line.strip()[:40]!r}")
        i += 1
    if tag is not None:
        raise DocsError(f"{doc.name}:{tag[0]}: a not-run tag must be right before a ``` fence")
    return found


def _dedent(line: str, indent: int) -> str:
    """``line`` without the fence's indentation (a fenced block inside a list item)."""
    if not indent or line[:indent].isspace():
        return line[indent:]
    return line.lstrip()


ALL = [b for doc in DOCS for b in blocks(doc)]
RUN = [b for b in ALL if b.lang in COMMANDS and b.not_run is None]


def test_every_block_has_a_language_and_every_tag_a_reason_before_a_command_block():
    assert len(DOCS) == 2 and all(doc.is_file() for doc in DOCS)
    untyped = [b.name for b in ALL if not b.lang]
    assert not untyped, f"give these fences a language (```bash, ```python, ```text): {untyped}"
    stray = [b.name for b in ALL if b.not_run is not None and b.lang not in COMMANDS]
    assert not stray, f"not-run tags belong on command blocks only: {stray}"
    assert RUN, "the walk found no command block to run"


def test_the_readme_python_snippets_all_run_and_show_the_callback_finding_a_kit():
    # issue 24: the README's own snippets run as printed (none is an outline tagged away), and one of
    # them builds a model under kit.apply, scans it, and has LigerKitCallback() find that kit
    readme = [b for b in ALL if b.doc.name == "README.md" and b.lang == "python"]
    assert readme and all(b.not_run is None for b in readme), [b.name for b in readme if b.not_run]
    assert any("kit.scan(model)" in b.text and "LigerKitCallback()" in b.text and "callback.handle.kit is kit"
               in b.text for b in readme), "a README snippet should show LigerKitCallback() finding a scanned kit"


def test_a_stray_or_empty_tag_is_an_error(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("<!-- not-run: needs a GPU -->\nsome prose\n```bash\necho hi\n```\n")
    with pytest.raises(DocsError, match="right before"):
        blocks(doc)
    doc.write_text("<!-- not-run: -->\n```bash\necho hi\n```\n")
    with pytest.raises(DocsError, match="give the reason"):
        blocks(doc)
    doc.write_text("<!-- not-run: pip install -->\n```bash\npip install x\n```\n\n"
                   "```python\nif x:\n    y()\n```\n- item\n  ```python\n  print(1)\n  ```\n")
    assert [(b.lang, b.not_run, b.text) for b in blocks(doc)] == [("bash", "pip install", "pip install x\n"),
                                                                  ("python", None, "if x:\n    y()\n"),
                                                                  ("python", None, "print(1)\n")]


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    """A clean, empty working folder for a python block: it runs as printed, with nothing the test made."""
    folder = tmp_path / "cwd"
    folder.mkdir()
    return folder


def test_no_untagged_python_block_reads_a_placeholder_path():
    """``path/to/...`` is a folder the reader brings: a block whose code (not a comment) names one is tagged."""
    def names_a_placeholder(text: str) -> bool:
        return any(re.search(r"""["']path/to/""", line.split("#", 1)[0]) for line in text.splitlines())

    untagged = [b.name for b in ALL if b.lang == "python" and b.not_run is None and names_a_placeholder(b.text)]
    assert not untagged, untagged


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(tmp: Path, python: bool = False) -> dict[str, str]:
    """This venv's bin first on PATH, a scratch TMPDIR, a free port for torchrun's rendezvous; for a
    python block, the repository root on the import path (as for a snippet run from the root)."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["TMPDIR"] = str(tmp)
    env["PET_MASTER_PORT"] = str(_free_port())  # torchrun --master-port, when the command gives none
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("PYTHONPATH", None)  # the installed package, as a reader has it
    if python:
        env["PYTHONPATH"] = str(ROOT)  # recipes/, as from the root; ligerkit itself stays the installed one
    return env


@pytest.mark.parametrize("block", RUN, ids=[b.name for b in RUN])
def test_the_documented_block_runs_as_printed(block: Block, scratch: Path, tmp_path: Path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    if block.lang in SHELLS:
        cmd, cwd = ["bash", "-c", "set -euo pipefail\n" + block.text], ROOT
    else:
        script = tmp_path / "block.py"
        script.write_text(block.text)
        cmd, cwd = [sys.executable, str(script)], scratch
    done = subprocess.run(cmd, cwd=cwd, env=_env(tmp, python=block.lang == "python"), capture_output=True,
                          text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, (
        f"{block.name} failed (exit {done.returncode}) as printed:\n{block.text}\n"
        f"--- stdout (end) ---\n{done.stdout[-2000:]}\n--- stderr (end) ---\n{done.stderr[-4000:]}\n"
        "Fix the command or the code it runs; if the block cannot run on a CPU, put "
        "<!-- not-run: REASON --> on the line before its fence.")
    if re.search(r"(--num_processes|--nproc-per-node) 2 examples/accelerate_loop.py", block.text):
        # the example reports the processes it trained in: 2, not a lone process (issue 24)
        assert '"processes": 2' in done.stdout, done.stdout[-2000:]
