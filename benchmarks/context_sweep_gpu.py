"""GPU: the longest sequence each arm trains at, batch 1 (``ligerkit.proof.context_sweep``).

Per arm, sequence lengths double from ``--start`` (halved first while it does not fit) until a run does
not fit (out of memory, or refused by the footprint check), then are bisected until the longest fit and
the shortest miss are within ``--precision``. Every trial is one ``ligerkit train`` process of
``--steps`` steps (the second step holds the optimizer's states and the activations at once). Trials are
appended to ``--out`` as they finish; rerunning with the same ``--out`` resumes the search, so the sweep
fits a time-limited command (``--deadline`` seconds: no trial starts that would end after it, as the
arm's longest trial so far predicts it). A length whose trial would take longer than ``--trial-limit``
(default: ``--deadline``) is recorded as too slow to measure, a miss for the search: that arm's longest
fit is then bounded by time, not by memory. Give ``--trial-limit`` when a command has less time left than
a whole command would have. A run that stops at the deadline names the trial it stopped before
(``next_trial`` in the summary) and, when that trial alone outlasts ``--deadline``, the deadline it needs;
its summary still settles every arm's lengths past ``--trial-limit`` (no trial runs for that).
With ``--split``, a trial predicted past ``--trial-limit`` whole runs in parts when each part fits it: step
1 in a process that stops with a checkpoint (``train.run.stop_after_steps=1``, the run folder under
``--work``), the other steps in a process that resumes it, in this command when its time allows, else in
the next one, which must find that folder (the same machine; ``OUT.part.json`` names it; a folder that is
not there starts the trial over). Such a trial fits when every step did; it records ``processes: 2``; its
resumed steps start with the allocator's cache empty (a one-process trial's step 2 inherits step 1's).
Whether a length fits is not always monotonic (the CUDA allocator): ``--probe ARM=LENGTH`` also tries a
length the search skipped (first, within the same limits), and a fit there raises that arm's search.
Each trial records its setting (``ligerkit.proof.record_setting.sweep_setting``: the config with the ``--set``
lines, ``--steps``, the card, the stack's versions, ``PYTORCH_CUDA_ALLOC_CONF``); a run whose setting differs
from the record's refuses to add to it, before its first trial, naming what differs (search options such as
``--start``, ``--precision``, ``--probe`` and the arms may change between runs). The summary
(``OUT.summary.json``, and the table printed) has a row for every arm in the record: this run's arms first
(``searched``; ``complete`` says whether their searches finished), then those only earlier runs searched, as
the record has them.

With ``--grads LENGTH``, every arm's step-1 gradients are checked first at that (shorter) length against
a float32 run, judged against the reference arm's (an arm that fails is left out of the recommendation);
the ``.grads.json`` beside ``--out`` keeps every check run, by length, reference and arms: a run whose arms
one of them covers reuses it, any other adds its own. Without ``--grads``, the summary and the
recommendation take the newest kept check that covers the run's arms and was measured in the record's
setting (read, never measured), else none.
With ``--breakdown``, a complete search also says where each arm's memory goes at its longest length
(``benchmarks/memory_gpu.py --saved``: weights, states, what the forward keeps by kind of module, the
peak), in one process per arm whose first step, the one that makes the optimizer states, is a short one
(``BREAKDOWN_FIRST_STEP`` tokens): about one trial step's time at the longest length, so a length whose
trial ran in parts (``--split``) gets its breakdown too.

    python benchmarks/context_sweep_gpu.py --out $OUT/context.jsonl [--recipe qwen3] \
        [--arms eager+ckpt,liger_fused,liger_fused+offload] [--start 4096] [--limit 1048576] [--deadline 540] \
        [--breakdown] [--split [--work runs/context_sweep]]

An arm is a bench arm, or one with memory variants (``ligerkit.proof.context_sweep.VARIANTS``: ``+ckpt``
checkpoints each layer, ``+offload`` also keeps its input in host memory, ``+tiled`` takes Liger's tiled MLP).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

from ligerkit import whole_files
from ligerkit.errors import LigerKitError
from ligerkit.proof.arm_runs import ArmFailedError, default_runner, resolve_config, summarize
from ligerkit.proof.context_sweep import (TOO_SLOW, Trial, arm_spec, breakdown_markdown, check_search_range,
                                          next_length, predicted_seconds, recommendation, summary, sweep_gradients,
                                          to_markdown, trial_overrides)
from ligerkit.proof.recommend import GradCheck
from ligerkit.proof.fits import allocator_state, describe_allocator, does_not_fit
from ligerkit.proof.record_setting import ALLOC_CONF, recorded_settings, setting_conflict, sweep_setting
from ligerkit.proof.sweep_record import read_breakdowns, read_grad_checks, read_parts, read_trials
from ligerkit.train.run.folder import metrics_rows


def write_json(path: Path, data: object) -> None:
    """Write ``data`` as JSON to ``path`` whole or not at all (a file beside it, then a rename): an interrupt
    leaves the gradient checks and breakdowns kept there as they were."""
    whole_files.write_whole(path, json.dumps(data, indent=2))


def require_cuda() -> None:
    """Refuse (:class:`LigerKitError`) to measure off a CUDA GPU."""
    if not torch.cuda.is_available():
        raise LigerKitError("the context sweep measures memory and time on a CUDA GPU, and this machine has none; "
                            "run it on the GPU machine (README, \"GPU runs\")")


def run_trial(config: Path, spec: str, seq_len: int, steps: int, extra: list[str]) -> Trial:
    """One arm (``ARM[+VARIANT...]``) at one length: fits (with its peak memory, tokens/s and times) or not
    (why)."""
    require_cuda()
    began = time.monotonic()
    try:
        run = default_runner()(config, trial_overrides(spec, seq_len, extra, steps))
    except ArmFailedError as exc:
        why = does_not_fit(str(exc))
        if why is None:
            raise
        return Trial(spec, seq_len, False, why, seconds=time.monotonic() - began, allocator=allocator_state(str(exc)))
    row = summarize(run, min(1, steps - 1))
    return Trial(spec, seq_len, True, "", row.get("peak_mem_gib"), row.get("tokens_per_s"),
                 time.monotonic() - began, row.get("step_time_s"))


def first_step(config: Path, spec: str, seq_len: int, steps: int, extra: list[str], folder: Path) -> Trial | dict:
    """Step 1 of a trial in parts (``--split``): a process that stops after it, leaving a checkpoint in the run
    folder ``folder`` (``train.run.stop_after_steps=1``). The part done (its ``run_dir``, the process's
    ``seconds``, the step's ``step_s`` and ``peak_mem_gib``, from the folder's ``metrics.jsonl``), or the
    trial as a miss when that step does not fit."""
    require_cuda()
    began = time.monotonic()
    lines = [*trial_overrides(spec, seq_len, extra, steps), f"train.run.output_dir={folder}",
             "train.run.stop_after_steps=1"]
    try:
        default_runner()(config, lines)
    except ArmFailedError as exc:
        why = does_not_fit(str(exc))
        if why is not None:
            return Trial(spec, seq_len, False, why, seconds=time.monotonic() - began,
                         allocator=allocator_state(str(exc)))
        rows = metrics_rows(folder, through=1) if folder.is_dir() else []
        if len(rows) != 1 or not (folder / "checkpoints").is_dir():  # not the stop asked for: a failure
            raise
        return {"arm": spec, "seq_len": seq_len, "run_dir": str(folder), "seconds": time.monotonic() - began,
                "step_s": rows[0]["step_time_s"], "peak_mem_gib": rows[0].get("peak_mem_gib")}
    raise LigerKitError(f"{spec} at {seq_len:,} tokens: the process for step 1 ran every step instead of stopping "
                        f"after it (train.run.stop_after_steps=1); its run folder is {folder}")


def other_steps(config: Path, spec: str, seq_len: int, steps: int, extra: list[str], part: dict) -> Trial:
    """The rest of a trial in parts: a process resuming ``part`` (:func:`first_step`) from its checkpoint for
    the other steps. The trial over both processes: it fits when every step did (peak memory the higher of the
    two, tokens/s and step time from the resumed steps, seconds the two processes' together)."""
    require_cuda()
    began = time.monotonic()
    folder = part["run_dir"]
    try:
        lines = [*trial_overrides(spec, seq_len, extra, steps), f"train.run.output_dir={folder}"]
        run = default_runner()(config, lines, resume=folder)
    except ArmFailedError as exc:
        why = does_not_fit(str(exc))
        if why is None:
            raise
        return Trial(spec, seq_len, False, why, seconds=part["seconds"] + time.monotonic() - began,
                     allocator=allocator_state(str(exc)), processes=2)
    row = summarize(run, 0)  # every step this process ran comes after the first
    peaks = [p for p in (part["peak_mem_gib"], row.get("peak_mem_gib")) if p is not None]
    return Trial(spec, seq_len, True, "", max(peaks, default=None), row.get("tokens_per_s"),
                 part["seconds"] + time.monotonic() - began, row.get("step_time_s"), processes=2)


def this_setting(config: Path, extra: list[str], steps: int) -> dict:
    """The setting this run's trials are measured in (``sweep_setting``), on this process's CUDA GPU."""
    require_cuda()
    card = torch.cuda.get_device_properties(0)
    return sweep_setting(config, extra, steps, card.name, card.total_memory / 2**30)


def refuse_another_setting(out: Path, recorded: list, setting: dict,
                           spared: str = "so nothing was run or written") -> None:
    """Stop (``SystemExit``) before measuring anything into ``out`` when its trials, gradient check or
    breakdown (their ``recorded`` settings) were measured in another setting than ``setting``; ``spared``
    says what this run left undone."""
    differs = setting_conflict(recorded, setting)
    if differs:
        raise SystemExit(f"context_sweep_gpu.py: {out} was measured in another setting than this run's ({differs}): "
                         f"its figures and this run's would not compare side by side, {spared}. Give --out a new "
                         "file, or run where and as the record was made (the same card, versions, config and --set "
                         f"lines, --steps and {ALLOC_CONF}).")


BREAKDOWN_FIRST_STEP = 4096  # tokens of the breakdown's first step, which only makes the optimizer states


def breakdown(config: Path, spec: str, seq_len: int, extra: list[str]) -> dict:
    """Where ``spec``'s memory goes at ``seq_len``: ``memory_gpu.py --saved`` in a process of its own, its
    first step at ``BREAKDOWN_FIRST_STEP`` tokens (or ``seq_len``, if shorter) and the measured one at
    ``seq_len`` (its JSON line, with ``seq_len``), or ``{"seq_len": ..., "error": ...}`` with its last line of
    errors."""
    cmd = [sys.executable, str(Path(__file__).with_name("memory_gpu.py")), str(config), "--saved",
           "--first-step-tokens", str(min(seq_len, BREAKDOWN_FIRST_STEP))]
    for line in trial_overrides(spec, seq_len, extra):
        cmd += ["--set", line]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    found = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode or not found:
        return {"seq_len": seq_len, "error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}
    return {"seq_len": seq_len, **json.loads(found[-1])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="JSONL of trials (appended; resumed from)")
    parser.add_argument("--recipe", default="qwen3", help="recipe or config (default: qwen3's gpu.yaml)")
    parser.add_argument("--arms", default="eager,liger,liger_fused",
                        help="comma-separated arms, ARM[+ckpt|+offload|+tiled...] (default: eager,liger,liger_fused)")
    parser.add_argument("--start", type=int, default=4096,
                        help="first length of every arm's search, in tokens (halved while it does not fit)")
    parser.add_argument("--limit", type=int, default=1 << 20, help="longest length tried (default: 1,048,576)")
    parser.add_argument("--precision", type=float, default=0.10,
                        help="bisect until the longest fit and shortest miss are this close (default: 0.10)")
    parser.add_argument("--steps", type=int, default=2,
                        help="training steps per trial; tokens/s from the steps after the first (default: 2)")
    parser.add_argument("--deadline", type=float, default=540,
                        help="seconds after which no trial ends (one predicted to end later does not start)")
    parser.add_argument("--trial-limit", type=float, metavar="SECONDS",
                        help="the longest one trial may take (default: --deadline): a length predicted to take "
                             "longer is recorded as too slow to measure, whatever time this run has left")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="config override for every trial (repeatable)")
    parser.add_argument("--reference", help="the arm the others are measured against (default: the first)")
    parser.add_argument("--grads", type=int, metavar="LENGTH",
                        help="first, step-1 gradients of every arm at LENGTH tokens against a float32 run, judged "
                             "against the reference arm's, kept in OUT's .grads.json beside earlier checks (one of "
                             "these arms at this length is reused, none is overwritten); an arm that fails is left "
                             "out of the recommendation")
    parser.add_argument("--probe", action="append", default=[], metavar="ARM=LENGTH",
                        help="also try ARM at LENGTH tokens, before the search (repeatable): whether a length fits "
                             "is not always monotonic (the allocator), and a fit found here raises that arm's search")
    parser.add_argument("--split", action="store_true",
                        help="run a trial predicted past --trial-limit in parts, each within --trial-limit and "
                             "--deadline: step 1 in a process that stops with a checkpoint, the other steps in one "
                             "that resumes it; a part left for the next command waits in OUT's .part.json with its "
                             "run folder under --work, which that command must find (the same machine)")
    parser.add_argument("--work", help="with --split: where the run folders of trials in parts go "
                                       "(default: runs/context_sweep)")
    parser.add_argument("--breakdown", action="store_true",
                        help="once the search is complete, where each arm's memory goes at its longest length "
                             "(benchmarks/memory_gpu.py --saved, one process per arm: a short step, then the "
                             "measured one at that length) into OUT's .breakdown.json")
    args = parser.parse_args()
    trial_limit = args.deadline if args.trial_limit is None else args.trial_limit
    if args.deadline <= 0 or trial_limit <= 0:
        parser.error(f"--deadline and --trial-limit take seconds above 0 (got {args.deadline:g}, {trial_limit:g})")
    try:
        check_search_range(args.start, args.limit, args.precision)
    except LigerKitError as exc:
        parser.error(str(exc))
    if args.steps < 2:
        parser.error(f"--steps takes 2 or more: tokens/s comes from the steps after the first (got {args.steps})")
    if args.work is not None and not args.split:
        parser.error("--work names where the run folders of trials in parts go; give --split with it")
    args.work = Path(args.work or "runs/context_sweep")
    if args.work.exists() and not args.work.is_dir():
        parser.error(f"--work takes a folder, and {args.work} is a file")
    if args.grads is not None and args.grads <= 0:
        parser.error(f"--grads takes a length in tokens above 0 (got {args.grads})")
    if (args.grads is not None or args.breakdown) and not torch.cuda.is_available():
        parser.error("--grads and --breakdown measure on a CUDA GPU, and this machine has none")
    began = time.monotonic()
    try:
        config = resolve_config(args.recipe)
        arms = args.arms.split(",")
        for spec in arms:
            arm_spec(spec)  # every arm named before the first trial
    except LigerKitError as exc:
        parser.error(str(exc))
    reference = args.reference or arms[0]
    if reference not in arms:
        parser.error(f"--reference takes one of --arms ({', '.join(arms)}), got {reference!r}")
    out = Path(args.out)
    try:  # an earlier run's record, refused before any trial when it is not one
        trials = read_trials(out)
        entries = read_grad_checks(out.with_suffix(".grads.json"))
        kept_breakdowns = read_breakdowns(out.with_suffix(".breakdown.json")) if args.breakdown else {}
        parts = read_parts(out.with_suffix(".part.json"))
    except LigerKitError as exc:
        parser.error(str(exc))
    probes = []
    for item in args.probe:
        arm, _, length = item.rpartition("=")
        if arm not in arms or not length.isdigit() or int(length) <= 0:
            parser.error(f"--probe takes ARM=LENGTH with ARM one of --arms and LENGTH tokens above 0 (got {item!r})")
        probes.append((arm, int(length)))
    setting: dict = {}  # this run's, read before its first measurement (a run that measures nothing needs no GPU)

    def measured_here() -> dict:
        if not setting:
            try:
                setting.update(this_setting(config, args.set, args.steps))
            except LigerKitError as exc:
                raise SystemExit(f"context_sweep_gpu.py: {exc}") from exc
            refuse_another_setting(out, [t.setting for t in trials], setting)
        return setting

    wanted = {reference, *arms}
    checks, entry = None, None

    # the summary keeps the record's other arms (searched by earlier runs) after this run's
    shown = [*arms, *(a for a in dict.fromkeys(t.arm for t in trials) if a not in wanted)]

    def covers(kept: dict) -> bool:  # a check of this run's reference and every one of its arms
        return kept.get("reference") == reference and wanted <= set(kept["arms"])

    def said(kept: dict) -> dict:
        """The checks in ``kept`` (one check) of the summary's arms, each printed."""
        found = {arm: GradCheck(**{**c, "failures": tuple(c["failures"])}) for arm, c in kept["arms"].items()
                 if arm in shown}  # the reference is one of the run's arms
        for arm, check in found.items():
            print(f"{'kept: ' if args.grads is None else ''}step-1 gradients at {kept['seq_len']:,} tokens, {arm}: "
                  f"{'PASS' if check.passed else 'FAIL'} ({check.reason}; worst {check.max_error:.3g})", flush=True)
        return found

    if args.grads is not None:
        grads_file = out.with_suffix(".grads.json")
        if entries:
            refuse_another_setting(grads_file, [e.get("setting") for e in entries], measured_here())
        entry = next((e for e in reversed(entries) if e.get("seq_len") == args.grads and covers(e)), None)
        if entry is None:  # measured and added beside the earlier checks, none of which is overwritten
            measured_here()
            try:
                found = sweep_gradients(config, arms, reference, args.grads, args.set, torch.device("cuda"))
            except LigerKitError as exc:  # nothing written: the search has not started
                raise SystemExit(f"context_sweep_gpu.py: {exc}") from exc
            entry = {"seq_len": args.grads, "reference": reference, "setting": setting,
                     "arms": {a: asdict(c) for a, c in found.items()}}
            write_json(grads_file, {"checks": [*entries, entry]})
        checks = said(entry)

    def record(trial: Trial, seconds: float) -> None:
        trials.append(trial)
        with out.open("a") as f:
            f.write(json.dumps(trial.to_dict()) + "\n")
        said = "fits" if trial.fits else trial.reason
        if trial.allocator:
            said += f" ({describe_allocator(trial.allocator)})"
        parted = f", {trial.processes} processes" if trial.processes > 1 else ""
        print(f"{trial.arm} {trial.seq_len}: {said} ({seconds:.0f} s{parted})", flush=True)

    waiting: dict = {}  # the trial the run stopped before, when it stopped at the deadline

    def guesses(arm: str, length: int) -> tuple[float | None, float | None]:
        """The arm's trials' prediction of a whole trial at ``length``, and of its longer part (``--split``)."""
        mine = [t for t in trials if t.arm == arm]
        whole = predicted_seconds(mine, length, args.steps)
        if not args.split or whole is None:
            return whole, None
        return whole, max(predicted_seconds(mine, length, args.steps, 1),
                          predicted_seconds(mine, length, args.steps, args.steps - 1))

    def too_slow(arm: str, length: int, search: bool) -> bool:
        """Whether the arm's trials predict ``length`` past ``--trial-limit`` (with ``--split``, its longer
        part): then it is said, never run nor put in ``--out``, and for the search kept as a miss (a
        prediction, not a measurement)."""
        whole, part = guesses(arm, length)
        guess, what = (whole, "a trial") if part is None or whole <= trial_limit else (part, "a part of a trial")
        if guess is None or guess <= trial_limit:
            return False
        reason = f"{TOO_SLOW}: about {guess:,.0f} s {what}, over the {trial_limit:g} s one {what[2:]} may take"
        if search:
            trials.append(Trial(arm, length, False, reason))
        print(f"{arm} {length}: {'' if search else 'not probed, '}{reason}", flush=True)
        return True

    parts_file = out.with_suffix(".part.json")

    def keep_parts() -> None:
        write_json(parts_file, {"parts": parts})

    def in_parts(arm: str, length: int) -> bool:
        """A trial in two processes (``--split``), each part run when it ends before ``--deadline``; ``False``
        when one would not (``waiting`` names it; a first step done waits in ``.part.json``)."""
        mine = [t for t in trials if t.arm == arm]
        part = next((p for p in parts if p["arm"] == arm and p["seq_len"] == length), None)
        if part is not None and not Path(part["run_dir"]).is_dir():
            print(f"{arm} {length}: step 1's run folder {part['run_dir']} is not here (another machine?); the "
                  "trial starts over", flush=True)
            parts.remove(part)
            keep_parts()
            part = None
        if part is None:
            guess = predicted_seconds(mine, length, args.steps, 1)
            if time.monotonic() - began + guess > args.deadline:
                waiting.update(arm=arm, seq_len=length, predicted_s=guess, part="step 1")
                return False
            here = measured_here()
            folder = args.work.resolve() / f"{out.stem}.{arm}.{length}.{time.time_ns()}"
            t0 = time.monotonic()
            done_or_miss = first_step(config, arm, length, args.steps, args.set, folder)
            if isinstance(done_or_miss, Trial):
                record(replace(done_or_miss, setting=here), time.monotonic() - t0)
                return True
            part = {**done_or_miss, "setting": here}
            parts.append(part)
            keep_parts()
            print(f"{arm} {length}: step 1 fits ({part['seconds']:.0f} s); the other steps resume {folder}",
                  flush=True)
        guess = predicted_seconds(mine, length, args.steps, args.steps - 1)
        if time.monotonic() - began + guess > args.deadline:
            waiting.update(arm=arm, seq_len=length, predicted_s=guess, part=f"steps 2-{args.steps}",
                           run_dir=part["run_dir"])
            return False
        here = measured_here()
        if part.get("setting") is not None:
            refuse_another_setting(parts_file, [part["setting"]], here)
        t0 = time.monotonic()
        trial = other_steps(config, arm, length, args.steps, args.set, part)
        record(replace(trial, setting=here), time.monotonic() - t0)
        parts.remove(part)
        keep_parts()
        return True

    def attempt(arm: str, length: int, search: bool) -> bool:
        """One trial of ``arm`` at ``length``, unless it is :func:`too_slow` (in parts when a whole one would
        take longer than ``--trial-limit``); ``False`` when it would end past ``--deadline`` (then ``waiting``
        names it)."""
        if too_slow(arm, length, search):  # no command of this sweep could run it
            return True
        guess, part = guesses(arm, length)
        if part is not None and guess > trial_limit:
            return in_parts(arm, length)
        if time.monotonic() - began + (guess or 0.0) > args.deadline:
            waiting.update(arm=arm, seq_len=length, predicted_s=guess)
            return False
        here = measured_here()
        t0 = time.monotonic()
        record(replace(run_trial(config, arm, length, args.steps, args.set), setting=here), time.monotonic() - t0)
        return True

    done = True
    for arm, length in probes:
        if not any(t.arm == arm and t.seq_len == length for t in trials) and not attempt(arm, length, False):
            done = False
            break
    for arm in arms if done else ():
        while (length := next_length([t for t in trials if t.arm == arm], args.start, args.limit,
                                     args.precision)) is not None:
            if not attempt(arm, length, True):
                done = False
                break
        if not done:
            break
    for arm in () if done else arms:  # a stopped run still settles, for every arm, what no command could measure
        while (length := next_length([t for t in trials if t.arm == arm], args.start, args.limit,
                                     args.precision)) is not None and too_slow(arm, length, True):
            pass
    if args.grads is None:  # the newest kept check of these arms in the whole record's setting: read, not measured
        entry = next((e for e in reversed(entries) if covers(e) and (
            e.get("setting") is None or not setting_conflict([t.setting for t in trials], e["setting"]))), None)
        checks = said(entry) if entry is not None else None
    result = summary(trials, shown, reference)
    advice = recommendation(result, reference, checks)
    write_json(out.with_suffix(".summary.json"), {
        "complete": done, "searched": arms, "next_trial": waiting or None, "reference": reference, "arms": result,
        "settings": recorded_settings(trials),
        "recommendation": advice,
        "gradients": None if checks is None else {"seq_len": entry["seq_len"],
                                                  "arms": {a: asdict(c) for a, c in checks.items()}},
    })
    print(to_markdown(result, reference))
    print(advice)
    if done:
        print("complete")
    elif (waiting.get("predicted_s") or 0.0) > args.deadline:  # no run with this --deadline can start it
        part = f" (its {waiting['part']}, a process of its own)" if "part" in waiting else ""
        print(f"stopped: the next trial, {waiting['arm']} at {waiting['seq_len']:,} tokens{part}, takes about "
              f"{waiting['predicted_s']:,.0f} s, more than --deadline {args.deadline:g} s allows a whole run: rerun "
              f"with a --deadline above that (or a --trial-limit below it, to record the length as too slow)")
    elif "run_dir" in waiting:
        print(f"stopped at the deadline: rerun the same command on this machine to continue ({waiting['arm']} at "
              f"{waiting['seq_len']:,} tokens resumes step 1's checkpoint in {waiting['run_dir']})")
    else:
        print("stopped at the deadline: rerun the same command to continue")
    if args.breakdown and done:
        path = out.with_suffix(".breakdown.json")
        measured = kept_breakdowns
        for arm in arms:
            longest = result[arm]["longest_fit"]
            if longest is None or measured.get(arm, {}).get("seq_len") == longest:
                continue
            # one process: a short step, then one at the longest length (the short one's time left out)
            guess = predicted_seconds([t for t in trials if t.arm == arm], longest, args.steps, of=1)
            if (guess or 0.0) > args.deadline:  # no rerun of this command can take it
                print(f"no breakdown of {arm} at {longest:,} tokens: it takes about {guess:,.0f} s (a step at that "
                      f"length in a process of its own), more than --deadline {args.deadline:g} s allows")
                continue
            if time.monotonic() - began + (guess or 0.0) > args.deadline:
                print("breakdown stopped at the deadline: rerun the same command to continue")
                break
            here = measured_here()
            refuse_another_setting(path, [row.get("setting") for row in measured.values()], here,
                                   "so no breakdown was measured or written into it")
            measured[arm] = {**breakdown(config, arm, longest, args.set), "setting": here}
            write_json(path, measured)
        print(breakdown_markdown({arm: measured[arm] for arm in arms if arm in measured}))


if __name__ == "__main__":
    main()
