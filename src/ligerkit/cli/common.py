"""What every ``ligerkit`` verb shares: the app, the consoles, option parsing, error handling, output."""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
from collections.abc import Callable
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console, ConsoleDimensions
from typer.core import TyperCommand

from ligerkit.errors import InvalidOptionError, LigerKitError, LigerNeedsAcceleratorError, StoppedEarly
from ligerkit.naming import LOSS_MODULES

# Plain (click) help: boolean options show as bare flags, every option shows its metavar.
app = typer.Typer(
    help="Wire Liger Kernel into a training recipe before the model is built, and prove every swap.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
UNWRAPPED = 1_000_000  # the width of output that goes to a pipe or a log file: no line is ever broken


def wraps(stream: Any) -> bool:
    """Whether output to ``stream`` is wrapped: on a terminal, or where ``$COLUMNS`` asks for a width.
    Piped or redirected output is never wrapped, so a symbol name, a path or a table row stays on one line."""
    return bool(os.environ.get("COLUMNS")) or bool(getattr(stream, "isatty", lambda: False)())


def text_width() -> int:
    """The width plain text on stdout is wrapped at (:data:`UNWRAPPED` in a pipe or a log file)."""
    return shutil.get_terminal_size((80, 24)).columns if wraps(sys.stdout) else UNWRAPPED


class _Console(Console):
    """A rich console sized like the terminal on a terminal, and as wide as any line in a pipe or a log file
    (rich alone wraps those at 80 columns, or at the width of whatever terminal stdin is)."""

    @property
    def size(self) -> ConsoleDimensions:
        """The terminal's size, or :data:`UNWRAPPED` columns where output is not wrapped (see :func:`wraps`)."""
        size = super().size
        return size if wraps(self.file) else ConsoleDimensions(UNWRAPPED, size.height)


out = _Console()
err = _Console(stderr=True)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]


def set_option(scope: str, example: str) -> Any:
    """The ``--set KEY=VALUE`` option of a verb, documented as repeatable."""
    return typer.Option("--set", metavar="KEY=VALUE",
                        help=f"{scope}; repeat for several, e.g. {example}.")


class _Command(TyperCommand):
    """A verb whose single-valued options may be given once: a second ``--family`` is an error,
    never "the last one wins"."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        """Refuse a repeated single-valued option, then parse as click does."""
        seen: dict[str, int] = {}
        for param in self.make_parser(ctx).parse_args(args=list(args))[2]:
            if getattr(param, "multiple", True) or getattr(param, "count", False) or param.param_type_name != "option":
                continue
            seen[param.opts[0]] = seen.get(param.opts[0], 0) + 1
        repeated = [name for name, n in seen.items() if n > 1]
        if repeated:
            fail(InvalidOptionError(f"{', '.join(repeated)} given more than once; give each option once "
                                    f"(see ligerkit {ctx.info_name} --help)."))
        return super().parse_args(ctx, args)

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        """Click's usage line: ``MODULE`` for a required argument, ``[RECIPE]`` for an optional one."""
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name == "argument":
                pieces.append(_argument_name(param) if param.required else f"[{_argument_name(param)}]")
        return pieces

    def format_options(self, ctx: Any, formatter: Any) -> None:
        """Arguments by name and help (no ``<str>``), then the options with their metavars."""
        params = self.get_params(ctx)
        arguments = [(_argument_name(p), getattr(p, "help", None) or "") for p in params
                     if p.param_type_name == "argument"]
        options = [r for p in params if p.param_type_name == "option" and (r := p.get_help_record(ctx))]
        for title, rows in (("Arguments", arguments), ("Options", options)):
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


def _argument_name(param: Any) -> str:
    return param.metavar or param.name.upper()


def command(short_help: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Register a verb on :data:`app` (with its one-line summary for ``ligerkit --help``)."""
    return app.command(cls=_Command, short_help=short_help)


_TRUE = {"on", "true", "1", "yes"}
_FALSE = {"off", "false", "0", "no"}


def parse_modules(spec: str) -> str | dict[str, bool]:
    """``auto`` or ``rope=on,swiglu=off`` -> ``"auto"`` or ``{"rope": True, "swiglu": False}``.

    Empty items, a name without a value and a name given twice are errors, never guesses.
    """
    spec = spec.strip()
    if spec == "auto":
        return "auto"
    selection: dict[str, bool] = {}
    for item in (p.strip() for p in spec.split(",")):
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip().lower()
        if not item or not sep or not name or value not in _TRUE | _FALSE:
            raise InvalidOptionError(
                f"--modules: cannot read {item!r} in {spec!r}; use 'auto' or name=on|off pairs, e.g. "
                "rope=on,swiglu=off."
            )
        if name in selection:
            raise InvalidOptionError(f"--modules names {name!r} twice; give each module once.")
        selection[name] = value in _TRUE
    return selection


def parse_exclude(spec: str | None) -> tuple[str, ...]:
    """Comma-separated module names; ``none`` for no exclusions; default: the loss kernels."""
    if spec is None:
        return LOSS_MODULES
    if spec.strip().lower() == "none":
        return ()
    names = tuple(p.strip() for p in spec.split(","))
    if not all(names):
        raise InvalidOptionError(
            f"--exclude {spec!r} has an empty name; list module names (e.g. cross_entropy,"
            "fused_linear_cross_entropy), or 'none' to exclude nothing."
        )
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise InvalidOptionError(f"--exclude names {', '.join(repeated)} twice; give each module once.")
    return names


def non_empty(option: str, value: str | None) -> str | None:
    """``value``, refusing an empty string (an empty option is a mistake, never a default)."""
    if value is not None and not value.strip():
        raise InvalidOptionError(f"{option} is empty; give a value or leave the option out.")
    return value


def run(body: Callable[[], None]) -> None:
    """Run a verb's body: a ligerkit error exits 1 (or its own code) with its message on stderr, an
    interrupt exits 130 (143 after SIGTERM), never with a traceback: also when a second signal lands while
    the first one's stop is still saving, printing or shutting down."""
    try:
        try:
            body()
        except LigerKitError as exc:
            fail(exc)
        except Exception as exc:
            code = _stopped_by_signal(exc)
            if code is None:
                _storage_full(exc)
                raise
            _stopped_at_once(code)
    except KeyboardInterrupt:
        _stopped_at_once(_stopped_by_signal(None) or 130)


def _stopped_by_signal(exc: BaseException | None) -> int | None:
    """The exit code when a second SIGINT/SIGTERM stopped a run (also one some library wrapped in an error
    of its own), else ``None``. Reads ``ligerkit.train.stopping`` only where a run imported it."""
    stopping = sys.modules.get("ligerkit.train.stopping")
    signum = stopping.forced_stop() if stopping is not None else None
    if signum is not None:
        return stopping.exit_code_of(signum)
    while exc is not None:  # an interrupt some library caught and chained
        if isinstance(exc, KeyboardInterrupt):
            return 130
        exc = exc.__cause__ or exc.__context__
    return None


def _storage_full(exc: BaseException) -> None:
    """Exit 1 with a :class:`~ligerkit.errors.StorageError` saying what to do when ``exc`` (or what it wraps) is a
    disk that is full, read-only or not writable here (``ligerkit.train.run.storage``)."""
    from ligerkit.train.run.storage import storage_cause, storage_error

    cause = storage_cause(exc)
    if cause is not None:
        fail(storage_error(cause, "a file"))


def _stopped_at_once(code: int) -> NoReturn:
    err.print("stopped at once (a second signal): the step in progress and any checkpoint being written are "
              "lost; continue from the newest complete checkpoint with `ligerkit train --resume RUN_DIR`",
              markup=False, soft_wrap=True)
    raise typer.Exit(code) from None


def fail(exc: LigerKitError) -> NoReturn:
    """Exit 1 (or the error's own exit code) with the error's type and message on stderr; a run stopped on
    purpose (:class:`~ligerkit.errors.StoppedEarly`: a Ctrl-C, a step limit) prints as a stop, not an error."""
    if not isinstance(exc, StoppedEarly):
        err.print(f"[bold red]error[/]: {type(exc).__name__}: ", end="")
    err.print(str(exc), markup=False, soft_wrap=True)
    raise typer.Exit(getattr(exc, "exit_code", 1)) from None


def emit_json(data: Any) -> None:
    """Write ``data`` as indented JSON on stdout (machine-readable output of ``--json``)."""
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


def render_scan(scan: Any, model_class: str, config_source: str | None = None, unproven: int = 0) -> None:
    """Print a scan result, one finding a line."""
    for line in scan_lines(scan, model_class, config_source, unproven):
        out.print(line, markup=False, soft_wrap=True)


def scan_lines(scan: Any, model_class: str, config_source: str | None = None, unproven: int = 0) -> list[str]:
    """The scan result as plain lines (:meth:`ligerkit.kit.scan.ScanResult.lines`)."""
    return scan.lines(model_class, config_source, unproven)


class _StderrHandler(logging.StreamHandler):
    """A handler that writes to whatever ``sys.stderr`` is when a line is logged (a command run in-process,
    as a test runner does, swaps it per call), unless a stream is set on it (the progress bar's)."""

    _set: Any = None

    @property  # type: ignore[override]
    def stream(self) -> Any:
        """The stream set on the handler, else the current ``sys.stderr``."""
        return self._set if self._set is not None else sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        self._set = None if value is sys.stderr else value


def log_to_stderr() -> None:
    """Show the ``ligerkit`` logger's INFO lines on stderr (the library itself never adds handlers)."""
    logger = logging.getLogger("ligerkit")
    if not logger.handlers:
        handler = _StderrHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s", "%H:%M:%S"))
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)


def require_gpu(verb: str) -> None:
    """Exit with code 3 and the reason where Liger's kernels cannot run."""
    from ligerkit.proof import arm_runs

    try:
        arm_runs.require_accelerator(verb)
    except LigerNeedsAcceleratorError as exc:
        err.print(str(exc), markup=False, soft_wrap=True)
        raise typer.Exit(arm_runs.NO_GPU_EXIT) from None


def tolerance(cls: Any, factor: float, slack: float) -> Any:
    """A gradient tolerance from the CLI's options (a bad value is an InvalidOptionError)."""
    try:
        return cls(factor, slack)
    except ValueError as exc:
        raise InvalidOptionError(f"--grad-factor/--grad-slack: {exc}") from None
