"""The ``ckptscan`` command line: a thin shell over ``ckptscan.api`` (parse, call, print).

Exit codes: 0 healthy, 1 anomaly found, 2 usage error, 3 input error (something could not be read),
4 internal error (a bug), 5 inconclusive (too little of the run to examine).  ``--fail-on`` chooses
which of 1, 3 and 5 fail the command.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import shutil
import sys
import time
import traceback
from pathlib import Path
from typing import ClassVar

import click

from ckptscan import __version__
from ckptscan._alloc import bound_heap_growth
from ckptscan.errors import EXIT_INTERNAL, CkptscanError, printable, printable_tree

MAX_WIDTH = 100  # every report line fits in this many columns (docs/report.md)
EXIT_PIPE = 141  # stdout closed by its reader: what a shell reports for SIGPIPE
VERDICT_REACHED = "ckptscan.verdict_reached"  # ctx.meta: a failure after this point is not "no verdict"
EVIDENCE = "ckptscan.evidence"  # ctx.meta: the folders no output may go into (report: the stored run's)
PROGRESS_EVERY_S = 5.0  # without a terminal: a progress line at most this often (and first, last, skipped)


def _console(stderr: bool = False):
    """A rich console at most ``MAX_WIDTH`` wide (narrower when the terminal is)."""
    from rich.console import Console

    no_color = bool(os.environ.get("NO_COLOR"))
    stream = sys.stderr if stderr else sys.stdout
    width = MAX_WIDTH
    if stream.isatty():
        width = min(MAX_WIDTH, shutil.get_terminal_size((MAX_WIDTH, 24)).columns)
    console = Console(stderr=stderr, no_color=no_color, highlight=False, width=width)

    def broken_pipe():  # rich would exit 1, the code of an anomaly: end as handle_errors does
        raise BrokenPipeError

    console.on_broken_pipe = broken_pipe  # type: ignore[method-assign]  # rich documents this hook for overriding
    return console


class _Main(click.Group):
    """The ``ckptscan`` group: subcommands with heavy imports (torch) are imported only when run, so
    that ``--help`` and ``--version`` stay fast; a usage mistake is one line on stderr (exit 2), like
    every other error."""

    # name -> (module, attribute, one-line help for ``ckptscan --help``)
    LAZY: ClassVar[dict[str, tuple[str, str, str]]] = {
        "drill": (
            "ckptscan.drills.cli",
            "drill",
            "Train a tiny model with a fault injected; write a checkpointed run.",
        ),
        "eval": (
            "ckptscan.drills.evaluate",
            "eval_cmd",
            "Analyse every drill run (folders with truth.json) and score the verdicts.",
        ),
    }

    def list_commands(self, ctx):
        return sorted([*super().list_commands(ctx), *self.LAZY])

    def get_command(self, ctx, name):
        if name in self.LAZY:
            module, attr, _ = self.LAZY[name]
            return getattr(importlib.import_module(module), attr)
        return super().get_command(ctx, name)

    def format_commands(self, ctx, formatter):
        rows = [
            (n, self.LAZY[n][2] if n in self.LAZY else self.commands[n].get_short_help_str(limit=80))
            for n in self.list_commands(ctx)
        ]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, **extra)
        except click.UsageError as e:
            where = e.ctx.command_path if e.ctx is not None else "ckptscan"
            click.echo(f"ckptscan: error: {e.format_message()} (see '{where} --help')", err=True)
            sys.exit(e.exit_code)
        except click.ClickException as e:
            click.echo(f"ckptscan: error: {e.format_message()}", err=True)
            sys.exit(e.exit_code)
        except click.Abort:
            click.echo("ckptscan: aborted", err=True)
            sys.exit(130)
        sys.exit(code if isinstance(code, int) else 0)


def handle_errors(fn):
    """One line naming the file and the problem, the right exit code; with --debug, the traceback
    first (the exit code stays the error's: a CI job run with --debug must not read a bad input as
    "anomalous", exit 1).

    When the command stops before a verdict, the CI outputs it was asked for still say so: a JUnit
    file (``--junit``) and, under GitHub Actions, an annotation and the job summary read "no verdict"
    with the error, instead of being missing or left over from an earlier run.  A reader that
    closes stdout early (``| head``) ends the command quietly (exit 141, as a shell reports SIGPIPE)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        debug = kwargs.get("debug", False)
        try:
            return fn(*args, **kwargs)
        except BrokenPipeError:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
            sys.exit(EXIT_PIPE)
        except CkptscanError as e:
            if debug:  # the traceback, then the same line and exit code as without --debug
                traceback.print_exc()
            _stop(f"error: {printable(str(e))}", e.exit_code, kwargs)
        except KeyboardInterrupt:
            click.echo("ckptscan: interrupted (finished checkpoints are kept; re-run to resume)", err=True)
            sys.exit(130)
        except (click.exceptions.Exit, click.ClickException, SystemExit):
            raise
        except Exception as e:  # a bug: still one line unless --debug
            if debug:
                traceback.print_exc()
            _stop(
                f"internal error: {type(e).__name__}: {printable(str(e))}"
                + ("" if debug else " (re-run with --debug for the traceback)"),
                EXIT_INTERNAL,
                kwargs,
            )

    return wrapper


def _stop(message: str, code: int, kwargs: dict):
    click.echo(f"ckptscan: {message}", err=True)
    ctx = click.get_current_context(silent=True)
    reached = ctx is not None and ctx.meta.get(VERDICT_REACHED)
    if "junit_file" in kwargs and not reached:  # analyze, report: the commands whose outputs CI reads
        from ckptscan.pipeline.analyzer import check_outputs
        from ckptscan.report.ci import no_verdict_outputs

        run = kwargs.get("run_dir") or kwargs.get("out_dir")
        junit = kwargs.get("junit_file")
        evidence = ctx.meta.get(EVIDENCE) if ctx is not None else None
        try:  # never into the evidence, not even to say there is no verdict
            check_outputs(evidence or [kwargs.get("run_dir"), kwargs.get("baseline")], files=(junit,))
        except CkptscanError:
            junit = None
        for problem in no_verdict_outputs(message, run=str(run), junit_file=junit):
            click.echo(f"ckptscan: warning: {problem}", err=True)
    sys.exit(code)


@click.group(
    cls=_Main, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": MAX_WIDTH}
)
@click.version_option(__version__, prog_name="ckptscan")
def main():
    """Offline checkpoint forensics for LLM training runs.

    Walks a run's checkpoints, recomputes mechanism-driven monitors per layer, head and step (QK
    spectral entropies, update ratios, MoE router statistics), and reports the earliest anomalous
    step, the fault class and the lead time over the loss curve.
    """
    bound_heap_growth()  # the CLI owns the process: keep peak memory flat over many checkpoints


def _existing(dir_okay=True, file_okay=True):
    return click.Path(exists=True, dir_okay=dir_okay, file_okay=file_okay, path_type=Path)


class _RunDir(click.ParamType):
    """An existing local folder, or a URL (``s3://bucket/run``: any fsspec URL, kept as given)."""

    name = "RUN_DIR"

    def convert(self, value, param, ctx):
        from ckptscan.readers.remote import is_url

        if isinstance(value, str) and is_url(value):
            return value
        return _existing(file_okay=False).convert(value, param, ctx)


def _report_options(verb: str):
    """One ``--<name> FILE`` option per registered report format (``report/formats.py``)."""
    from ckptscan.report.formats import REPORT_FORMATS

    def add(fn):
        for fmt in reversed(REPORT_FORMATS.values()):
            fn = click.option(
                f"--{fmt.name}",
                fmt.keyword,
                type=click.Path(dir_okay=False, path_type=Path),
                help=f"{verb} {fmt.help}",
            )(fn)
        return fn

    return add


def _common_analysis_options(fn):
    opts = [
        click.option(
            "--steps",
            metavar="START:END",
            help="Only checkpoints with START <= step <= END (either side may be empty).",
        ),
        click.option(
            "--every", type=click.IntRange(min=1), help="Only every N-th checkpoint (in step order)."
        ),
        click.option(
            "--step-regex",
            metavar="REGEX",
            help="Regex with one group capturing the step, for unusual checkpoint names.",
        ),
        click.option(
            "--device",
            type=click.Choice(["auto", "cpu", "cuda"]),
            default="auto",
            show_default=True,
            help="Where the maths runs; auto takes CUDA when present.",
        ),
        click.option(
            "--layout",
            "layout_file",
            type=_existing(dir_okay=False),
            help=(
                "TOML file mapping tensor-name regexes to roles, for architectures ckptscan does not know "
                "(docs/layouts.md)."
            ),
        ),
        click.option(
            "--config",
            "config_file",
            type=_existing(dir_okay=False),
            help="Model config for checkpoints that carry none: an HF config.json, or a layout TOML (as --layout).",
        ),
        click.option(
            "--heads", type=click.IntRange(min=1), help="Number of attention heads (overrides any config)."
        ),
        click.option(
            "--kv-heads",
            type=click.IntRange(min=1),
            help="Number of key/value heads (grouped-query attention; overrides any config).",
        ),
        click.option(
            "--trust-pickle",
            is_flag=True,
            help=(
                "Allow torch files that need arbitrary unpickling. DANGEROUS: this executes code from the "
                "checkpoint; only for files you trust. Without it such files are refused."
            ),
        ),
        click.option(
            "--replay/--no-replay",
            default=True,
            show_default=True,
            help="Use replay activation files when the run has them.",
        ),
        click.option(
            "--replay-pattern",
            metavar="PATTERN",
            help=(
                "Where replay files are, relative to the run dir, e.g. 'replay/step_{step}.h5' "
                "(default: replay.h5 in each checkpoint)."
            ),
        ),
        click.option(
            "--log",
            "log_file",
            type=_existing(),
            help="Training log to read the loss from: trainer_state.json, *.jsonl, *.csv, or "
            "TensorBoard event files (a file or their folder).",
        ),
        click.option(
            "--baseline",
            type=_existing(file_okay=False),
            help="A healthy reference run of the same recipe to compare against step by step.",
        ),
        click.option("--debug", is_flag=True, help="Show tracebacks and stop at the first bad checkpoint."),
    ]
    for o in reversed(opts):
        fn = o(fn)
    return fn


FAIL_ON_HELP = (
    "anomaly: exit 1 on an anomaly, 3 on unreadable input, 5 when inconclusive; input-error: "
    "exit 3 on unreadable input, 5 when inconclusive, never 1; never: 0 whatever the verdict "
    "(errors that stop the command still exit 2, 3 or 4)."
)


@main.command()
@click.argument("run_dir", type=_RunDir())
@click.option(
    "-o",
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Output folder (default ./ckptscan-out/<run-name>/). Never inside the run directory.",
)
@_common_analysis_options
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the summary JSON (schema ckptscan/1) to stdout instead of the terminal report.",
)
@_report_options("Also write")
@click.option(
    "--fail-on",
    type=click.Choice(["anomaly", "input-error", "never"]),
    default="anomaly",
    show_default=True,
    help=FAIL_ON_HELP,
)
@click.option(
    "-q", "--quiet", is_flag=True, help="No progress; only the verdict line (and skipped inputs on stderr)."
)
@click.option(
    "--executor",
    type=click.Choice(["local", "ray"]),
    default="local",
    show_default=True,
    help="Who runs the per-checkpoint work: local (this process), or ray (one Ray task per "
    'checkpoint; pip install "ckptscan[ray]"; docs/scale.md).',
)
@click.option(
    "--address",
    "ray_address",
    metavar="ADDR",
    help="--executor ray: the Ray cluster to join (default: RAY_ADDRESS, else a local instance).",
)
@click.option(
    "--workers",
    type=int,
    metavar="N",
    help="--executor ray: tasks in flight at once (default: the cluster's CPUs, or GPUs).",
)
@handle_errors
def analyze(
    run_dir,
    out_dir,
    steps,
    every,
    step_regex,
    device,
    layout_file,
    config_file,
    heads,
    kv_heads,
    trust_pickle,
    replay,
    replay_pattern,
    log_file,
    baseline,
    debug,
    as_json,
    fail_on,
    quiet,
    executor,
    ray_address,
    workers,
    **report_files,
):
    """Analyse the checkpoints of RUN_DIR and report the earliest anomalous step and the fault class.

    Results (timeline.h5, summary.json) go to ./ckptscan-out/<run-name>/; re-running resumes and
    only computes new or changed checkpoints.

    \b
    Exit codes: 0 healthy, 1 anomaly found, 2 usage error, 3 input error (a checkpoint or file
    could not be read; the rest of the run is still analysed), 4 internal error, 5 inconclusive
    (no alarm, but too little of the run could be examined to call it healthy).
    """
    from ckptscan.api import analyze as run
    from ckptscan.config import AnalysisConfig
    from ckptscan.pipeline.analyzer import check_outputs
    from ckptscan.report import emit

    config = AnalysisConfig(
        steps=steps,
        every=every,
        step_regex=step_regex,
        device=device,
        layout_file=layout_file,
        config_file=config_file,
        heads=heads,
        kv_heads=kv_heads,
        trust_pickle=trust_pickle,
        replay=replay,
        replay_pattern=replay_pattern,
        log_file=log_file,
        baseline=baseline,
        executor=executor,
        ray_address=ray_address,
        workers=workers,
    )
    # before anything is written
    local_run = None if isinstance(run_dir, str) else run_dir  # a URL: nothing local to protect
    check_outputs([local_run, baseline], files=tuple(report_files.values()))
    with _progress(not quiet) as on_progress:
        result = run(
            run_dir,
            config,
            out_dir=out_dir,
            on_progress=on_progress,
            debug=debug,
            command=["ckptscan", *sys.argv[1:]],
        )
    click.get_current_context().meta[VERDICT_REACHED] = True
    for sk in result.skipped:  # on stderr too: with --quiet or --json this is the only place they show
        kind = "warning: skipped" if sk.error else "note: skipped (expected in a live run)"
        click.echo(f"ckptscan: {kind} {printable(sk.path)}: {printable(sk.reason)}", err=True)
    emit(result, as_json=as_json, quiet=quiet, console=_console(), **report_files)
    sys.exit(result.exit_code(fail_on))


class _progress:
    """Progress over checkpoints on stderr: a rich bar (with ETA) in a terminal; otherwise plain lines
    for CI logs, for the first and the last checkpoint, every skipped one and at most every
    ``PROGRESS_EVERY_S`` seconds in between, each with the time so far and an ETA.  Nothing when
    not wanted."""

    def __init__(self, enabled: bool, every_s: float = PROGRESS_EVERY_S, clock=time.monotonic):
        self.enabled = enabled
        self.every_s = every_s
        self.clock = clock
        self.bar = None
        self.task = None

    def __enter__(self):
        if not self.enabled:
            return None
        if not sys.stderr.isatty():
            return self._lines()
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[status]}"),
            console=_console(stderr=True),
            transient=True,
        )
        self.bar.__enter__()

        def update(i, total, ck, status):
            if self.task is None:
                self.task = self.bar.add_task("checkpoints", total=total, status="")
            self.bar.update(self.task, completed=i + 1, status=f"step {ck.step} {status}")

        return update

    def _lines(self):
        start = self.clock()
        last = [None]

        def update(i, total, ck, status):
            now = self.clock()
            done = i + 1
            if not (last[0] is None or done == total or status == "skipped" or now - last[0] >= self.every_s):
                return
            last[0] = now
            elapsed = now - start
            eta = elapsed / done * (total - done)
            click.echo(
                f"ckptscan: checkpoint {done}/{total} (step {ck.step}) {printable(status)}; "
                f"{_duration(elapsed)} elapsed, ETA {_duration(eta)}",
                err=True,
            )

        return update

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.__exit__(*exc)
        return False


def _duration(seconds: float) -> str:
    if seconds < 10:
        return f"{seconds:.1f}s"
    s = round(seconds)
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


@main.command()
@click.argument("run_dir", type=_existing(file_okay=False))
@click.option(
    "-o",
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Output folder (default ./ckptscan-out/<run-name>/, as for analyze). Never inside the run directory.",
)
@_common_analysis_options
@click.option(
    "--poll",
    type=click.FloatRange(min=0.05),
    default=10.0,
    show_default=True,
    metavar="SECONDS",
    help="Seconds between two looks at the run.",
)
@click.option(
    "--idle",
    type=click.FloatRange(min=0),
    metavar="SECONDS",
    help="Stop after SECONDS without a new checkpoint (and none being written).",
)
@click.option(
    "--until",
    "until_step",
    type=click.IntRange(min=0),
    metavar="STEP",
    help="Stop once the checkpoints up to STEP (or a later one) are analysed.",
)
@click.option(
    "--stale",
    type=click.FloatRange(min=0),
    default=600.0,
    show_default=True,
    metavar="SECONDS",
    help="An unfinished checkpoint left unchanged this long while later ones are finished is "
    "analysed anyway (and reported unreadable if it is).",
)
@click.option(
    "--status",
    "status_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="JSON status file, rewritten every round (default OUT/watch.json). Never inside the run.",
)
@click.option(
    "--on-alarm",
    metavar="CMD",
    help="Run CMD once when an alarm is confirmed (split like a shell's words, run without a "
    "shell); the verdict is in CKPTSCAN_* environment variables (docs/live.md).",
)
@click.option(
    "--hook-timeout",
    type=click.FloatRange(min=1),
    default=300.0,
    show_default=True,
    metavar="SECONDS",
    help="Seconds --on-alarm may run before it is killed.",
)
@click.option("--exit-on-alarm", is_flag=True, help="Stop at the first confirmed alarm, with exit code 1.")
@click.option(
    "--nice",
    type=click.IntRange(0, 19),
    default=10,
    show_default=True,
    help="Lower this process' CPU priority by N, so that the analysis yields to the trainer.",
)
@click.option(
    "--json", "as_json", is_flag=True, help="At the end, print the summary JSON instead of the report."
)
@click.option(
    "--fail-on",
    type=click.Choice(["anomaly", "input-error", "never"]),
    default="anomaly",
    show_default=True,
    help="Exit code policy when watching stops, as for analyze.",
)
@click.option("-q", "--quiet", is_flag=True, help="No line per round; at the end only the verdict line.")
@handle_errors
def watch(
    run_dir,
    out_dir,
    steps,
    every,
    step_regex,
    device,
    layout_file,
    config_file,
    heads,
    kv_heads,
    trust_pickle,
    replay,
    replay_pattern,
    log_file,
    baseline,
    debug,
    poll,
    idle,
    until_step,
    stale,
    status_file,
    on_alarm,
    hook_timeout,
    exit_on_alarm,
    nice,
    as_json,
    fail_on,
    quiet,
):
    """Follow RUN_DIR while a training run writes checkpoints; analyse each finished one as it lands.

    A checkpoint is analysed once its files are complete and unchanged between two polls, into the
    same resumable output folder as analyze.  When an alarm is confirmed: a line on stderr, the
    status file, --on-alarm CMD. Stops at --until, after --idle, at the alarm with --exit-on-alarm,
    or on Ctrl-C / SIGTERM; then prints the report of the last round.

    \b
    Exit codes: 1 at the alarm with --exit-on-alarm; otherwise those of analyze for the last verdict
    (0 healthy, 1 anomaly, 3 input error, 5 inconclusive or nothing analysed yet); 2 usage error.
    """
    import signal
    import threading

    from ckptscan.api import claim_out_dir, default_out_dir
    from ckptscan.pipeline.analyzer import check_outputs
    from ckptscan.report import emit
    from ckptscan.watch import STATUS_FILE, Watcher, WatchOptions, exit_code

    selection = {"steps": steps, "every": every, "step_regex": step_regex}
    out = out_dir if out_dir is not None else default_out_dir(run_dir, selection)
    status_file = status_file if status_file is not None else out / STATUS_FILE
    check_outputs([run_dir, baseline], out, files=(status_file,))  # before anything is written
    claim_out_dir(out, run_dir, selection)
    if nice:
        os.nice(nice)
    main_thread = threading.current_thread() is threading.main_thread()
    if main_thread:  # SIGTERM stops watching as Ctrl-C does
        previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    kwargs = {
        "steps": steps,
        "every": every,
        "step_regex": step_regex,
        "device": device,
        "layout_file": layout_file,
        "trust_pickle": trust_pickle,
        "replay": replay,
        "replay_pattern": replay_pattern,
        "log_file": log_file,
        "baseline": baseline,
        "config_file": config_file,
        "heads": heads,
        "kv_heads": kv_heads,
        "debug": debug,
        "command": ["ckptscan", *sys.argv[1:]],
    }
    opts = WatchOptions(
        poll=poll,
        idle=idle,
        until=until_step,
        stale=stale,
        on_alarm=on_alarm,
        hook_timeout=hook_timeout,
        exit_on_alarm=exit_on_alarm,
        analyze_kwargs=kwargs,
    )
    echo = functools.partial(click.echo, err=True)
    if not quiet:
        echo(
            f"ckptscan: watching {printable(str(run_dir))} every {poll:g}s; status: {printable(str(status_file))}"
        )
    try:
        outcome = Watcher(run_dir, out, status_file, opts, echo, progress=not quiet).run()
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
    click.get_current_context().meta[VERDICT_REACHED] = True
    if not quiet:
        echo(f"ckptscan: watch stopped ({outcome.reason})")
    if outcome.result is not None:
        emit(outcome.result, as_json=as_json, quiet=quiet, console=_console())
    sys.exit(exit_code(outcome, fail_on))


@main.command()
@click.argument("checkpoint", type=_existing())
@click.option("--layout", "layout_file", type=_existing(dir_okay=False), help="User layout file (TOML).")
@click.option(
    "--config",
    "config_file",
    type=_existing(dir_okay=False),
    help="Model config (HF config.json or a layout TOML).",
)
@click.option("--heads", type=click.IntRange(min=1), help="Number of attention heads (overrides any config).")
@click.option(
    "--kv-heads", type=click.IntRange(min=1), help="Number of key/value heads (overrides any config)."
)
@click.option(
    "--trust-pickle",
    is_flag=True,
    help="Allow torch files that need arbitrary unpickling (executes code: only for trusted files).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--all-tensors", is_flag=True, help="Also list every tensor in the checkpoint.")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@handle_errors
def inspect(checkpoint, layout_file, config_file, heads, kv_heads, trust_pickle, as_json, all_tensors, debug):
    """Show what ckptscan finds in one CHECKPOINT: format, architecture, per-layer tensors, heads."""
    from ckptscan.api import model_inputs
    from ckptscan.pipeline.checkpoint_info import describe_checkpoint
    from ckptscan.report.terminal import print_inspect

    layout_file, config_file, overrides = model_inputs(config_file, layout_file, heads, kv_heads)
    info = describe_checkpoint(
        checkpoint,
        layout_file=layout_file,
        trust_pickle=trust_pickle,
        all_tensors=all_tensors,
        config_file=config_file,
        model_overrides=overrides,
    )
    if as_json:
        click.echo(json.dumps(info, indent=2))
    else:
        print_inspect(printable_tree(info), _console())


@main.command()
@click.argument("out_dir", type=_existing(file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the stored summary JSON.")
@_report_options("Write")
@click.option(
    "--fail-on",
    type=click.Choice(["anomaly", "input-error", "never"]),
    default="never",
    show_default=True,
    help="Exit code policy, as for analyze.",
)
@click.option(
    "--baseline",
    "baseline_dir",
    type=_existing(file_okay=False),
    help="Another stored result (an analyze output folder, e.g. a healthy run's) that the HTML "
    "report draws beside this one.",
)
@click.option("-q", "--quiet", is_flag=True, help="Only the verdict line.")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@handle_errors
def report(out_dir, as_json, fail_on, baseline_dir, quiet, debug, **report_files):
    """Re-render a stored result (an analyze output folder) without recomputing.  An in-loop store
    (ckptscan.callbacks) whose part files are newer than its summary is assembled and judged first."""
    from ckptscan.api import load_result
    from ckptscan.callbacks.store import is_stale, write_result
    from ckptscan.pipeline.analyzer import check_outputs
    from ckptscan.report import emit

    if is_stale(out_dir):
        write_result(out_dir)
    result = load_result(out_dir)
    click.get_current_context().meta[EVIDENCE] = result.evidence
    check_outputs(result.evidence, files=tuple(report_files.values()))
    click.get_current_context().meta[VERDICT_REACHED] = True
    baseline = None
    if baseline_dir is not None:
        base = load_result(baseline_dir)
        baseline = (str(base.summary.get("run", baseline_dir)), base.timeline)
    emit(
        result,
        as_json=as_json,
        quiet=quiet,
        console=_console(),
        baseline=baseline,
        **report_files,
    )
    sys.exit(result.exit_code(fail_on))


@main.command()
@click.argument("result_dir", type=_existing(file_okay=False))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["csv", "parquet", "tensorboard"]),
    required=True,
    help="csv / parquet: one row per step, monitor, layer and head; tensorboard: event files "
    "at the training steps, to view beside the training curves.",
)
@click.option(
    "-o",
    "--out",
    "out_path",
    type=click.Path(path_type=Path),
    help="File (csv, parquet) or new folder (tensorboard) to write; default RESULT_DIR/export/.",
)
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@handle_errors
def export(result_dir, fmt, out_path, debug):
    """Write the monitors of a stored result (an analyze output folder) as CSV, Parquet or TensorBoard
    event files; prints the path written."""
    from ckptscan.api import load_result
    from ckptscan.report.export import export_result

    click.echo(str(export_result(load_result(result_dir), fmt, out_path)))


if __name__ == "__main__":  # pragma: no cover
    main()
