"""The ``ckptscan`` command line: a thin shell over ``ckptscan.api`` (parse, call, print).

Exit codes: 0 healthy, 1 anomaly found, 2 usage error, 3 input error (something could not be read),
4 internal error (a bug), 5 inconclusive (too little of the run to examine).  ``--fail-on`` chooses
which of 1, 3 and 5 fail the command.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path

import click

from ckptscan import __version__
from ckptscan._alloc import bound_heap_growth
from ckptscan.errors import EXIT_INTERNAL, CkptscanError, printable, printable_tree


def _console(stderr: bool = False):
    from rich.console import Console

    no_color = bool(os.environ.get("NO_COLOR"))
    return Console(stderr=stderr, no_color=no_color, highlight=False, width=None if sys.stdout.isatty() else 100)


def handle_errors(fn):
    """One line naming the file and the problem, the right exit code; tracebacks only with --debug."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        debug = kwargs.get("debug", False)
        try:
            return fn(*args, **kwargs)
        except CkptscanError as e:
            if debug:
                raise
            click.echo(f"ckptscan: error: {printable(str(e))}", err=True)
            sys.exit(e.exit_code)
        except KeyboardInterrupt:
            click.echo("ckptscan: interrupted (finished checkpoints are kept; re-run to resume)", err=True)
            sys.exit(130)
        except (click.exceptions.Exit, click.ClickException, SystemExit):
            raise
        except Exception as e:  # a bug: still one line unless --debug
            if debug:
                raise
            click.echo(f"ckptscan: internal error: {type(e).__name__}: {printable(str(e))} (re-run with --debug "
                       f"for the traceback)", err=True)
            sys.exit(EXIT_INTERNAL)

    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="ckptscan")
def main():
    """Offline checkpoint forensics for LLM training runs.

    Walks a run's checkpoints, recomputes mechanism-driven monitors per layer, head and step (QK
    spectral entropies, update ratios, MoE router statistics), and reports the earliest anomalous
    step, the fault class and the lead time over the loss curve.
    """
    bound_heap_growth()  # the CLI owns the process: keep peak memory flat over many checkpoints


def _common_analysis_options(fn):
    opts = [
        click.option("--steps", metavar="START:END", help="Only checkpoints with START <= step <= END (either side may be empty)."),
        click.option("--every", type=click.IntRange(min=1), help="Only every N-th checkpoint (in step order)."),
        click.option("--step-regex", metavar="REGEX", help="Regex with one group capturing the step, for unusual checkpoint names."),
        click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
                     help="Where the maths runs; auto takes CUDA when present."),
        click.option("--layout", "layout_file", type=click.Path(dir_okay=False, path_type=Path),
                     help="TOML file mapping tensor-name regexes to roles, for architectures ckptscan does not know (docs/layouts.md)."),
        click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path),
                     help="Model config for checkpoints that carry none: an HF config.json, or a layout TOML (as --layout)."),
        click.option("--heads", type=click.IntRange(min=1), help="Number of attention heads (overrides any config)."),
        click.option("--kv-heads", type=click.IntRange(min=1), help="Number of key/value heads (grouped-query attention; overrides any config)."),
        click.option("--trust-pickle", is_flag=True,
                     help="Allow torch files that need arbitrary unpickling. DANGEROUS: this executes code from the checkpoint; only for files you trust. Without it such files are refused."),
        click.option("--replay/--no-replay", default=True, show_default=True, help="Use replay activation files when the run has them."),
        click.option("--replay-pattern", metavar="PATTERN",
                     help="Where replay files are, relative to the run dir, e.g. 'replay/step_{step}.h5' (default: replay.h5 in each checkpoint)."),
        click.option("--log", "log_file", type=click.Path(dir_okay=False, path_type=Path), help="Training log (trainer_state.json, *.jsonl, *.csv) to read the loss from."),
        click.option("--baseline", type=click.Path(file_okay=False, path_type=Path), help="A healthy reference run of the same recipe to compare against step by step."),
        click.option("--debug", is_flag=True, help="Show tracebacks and stop at the first bad checkpoint."),
    ]
    for o in reversed(opts):
        fn = o(fn)
    return fn


@main.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Output folder (default ./ckptscan-out/<run-name>/). Never inside the run directory.")
@_common_analysis_options
@click.option("--json", "as_json", is_flag=True, help="Print the summary JSON (schema ckptscan/1) to stdout instead of the terminal report.")
@click.option("--html", "html_file", type=click.Path(dir_okay=False, path_type=Path), help="Also write a self-contained HTML report.")
@click.option("--junit", "junit_file", type=click.Path(dir_okay=False, path_type=Path), help="Also write a JUnit XML file for CI systems.")
@click.option("--fail-on", type=click.Choice(["anomaly", "input-error", "never"]), default="anomaly", show_default=True,
              help="anomaly: exit 1 on an anomaly, 3 on unreadable input, 5 when inconclusive; input-error: exit 3 on "
                   "unreadable input, 5 when inconclusive, never 1; never: always 0.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar; only the verdict line.")
@handle_errors
def analyze(run_dir, out_dir, steps, every, step_regex, device, layout_file, config_file, heads, kv_heads,
            trust_pickle, replay, replay_pattern, log_file, baseline, debug, as_json, html_file, junit_file,
            fail_on, quiet):
    """Analyse the checkpoints of RUN_DIR and report the earliest anomalous step and the fault class.

    Results (timeline.h5, summary.json) go to ./ckptscan-out/<run-name>/; re-running resumes and
    only computes new or changed checkpoints.

    \b
    Exit codes: 0 healthy, 1 anomaly found, 2 usage error, 3 input error (a checkpoint or file
    could not be read; the rest of the run is still analysed), 4 internal error, 5 inconclusive
    (no alarm, but too little of the run could be examined to call it healthy).
    """
    from ckptscan.api import analyze as run
    from ckptscan.pipeline import check_outputs
    from ckptscan.report import emit

    check_outputs([run_dir, baseline], files=(html_file, junit_file))  # before anything is written
    show_progress = not quiet and not as_json and sys.stderr.isatty()
    with _progress(show_progress) as on_progress:
        result = run(
            run_dir, out_dir=out_dir, steps=steps, every=every, step_regex=step_regex, device=device,
            layout_file=layout_file, trust_pickle=trust_pickle, replay=replay, replay_pattern=replay_pattern,
            log_file=log_file, baseline=baseline, config_file=config_file, heads=heads, kv_heads=kv_heads,
            on_progress=on_progress, debug=debug,
            command=["ckptscan", *sys.argv[1:]],
        )
    emit(result, as_json=as_json, quiet=quiet, html_file=html_file, junit_file=junit_file, console=_console())
    sys.exit(result.exit_code(fail_on))


class _progress:
    """A rich progress bar over checkpoints (with ETA), or nothing when not wanted."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.bar = None
        self.task = None

    def __enter__(self):
        if not self.enabled:
            return None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                            TextColumn("{task.fields[status]}"), console=_console(stderr=True), transient=True)
        self.bar.__enter__()

        def update(i, total, ck, status):
            if self.task is None:
                self.task = self.bar.add_task("checkpoints", total=total, status="")
            self.bar.update(self.task, completed=i + 1, status=f"step {ck.step} {status}")

        return update

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.__exit__(*exc)
        return False


@main.command()
@click.argument("checkpoint", type=click.Path(path_type=Path))
@click.option("--layout", "layout_file", type=click.Path(dir_okay=False, path_type=Path), help="User layout file (TOML).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path), help="Model config (HF config.json or a layout TOML).")
@click.option("--heads", type=click.IntRange(min=1), help="Number of attention heads (overrides any config).")
@click.option("--kv-heads", type=click.IntRange(min=1), help="Number of key/value heads (overrides any config).")
@click.option("--trust-pickle", is_flag=True, help="Allow torch files that need arbitrary unpickling (executes code: only for trusted files).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--all-tensors", is_flag=True, help="Also list every tensor in the checkpoint.")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@handle_errors
def inspect(checkpoint, layout_file, config_file, heads, kv_heads, trust_pickle, as_json, all_tensors, debug):
    """Show what ckptscan finds in one CHECKPOINT: format, architecture, per-layer tensors, heads."""
    from ckptscan.api import model_inputs
    from ckptscan.inspect import describe_checkpoint
    from ckptscan.report.terminal import print_inspect

    layout_file, config_file, overrides = model_inputs(config_file, layout_file, heads, kv_heads)
    info = describe_checkpoint(checkpoint, layout_file=layout_file, trust_pickle=trust_pickle, all_tensors=all_tensors,
                               config_file=config_file, model_overrides=overrides)
    if as_json:
        click.echo(json.dumps(info, indent=2))
    else:
        print_inspect(printable_tree(info), _console())


@main.command()
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the stored summary JSON.")
@click.option("--html", "html_file", type=click.Path(dir_okay=False, path_type=Path), help="Write the HTML report.")
@click.option("--junit", "junit_file", type=click.Path(dir_okay=False, path_type=Path), help="Write a JUnit XML file.")
@click.option("--fail-on", type=click.Choice(["anomaly", "input-error", "never"]), default="never", show_default=True,
              help="Exit code policy, as for analyze.")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@handle_errors
def report(out_dir, as_json, html_file, junit_file, fail_on, debug):
    """Re-render a stored result (an analyze output folder) without recomputing."""
    from ckptscan.api import load_result
    from ckptscan.pipeline import check_outputs
    from ckptscan.report import emit

    result = load_result(out_dir)
    check_outputs(result.evidence, files=(html_file, junit_file))
    emit(result, as_json=as_json, quiet=False, html_file=html_file, junit_file=junit_file, console=_console())
    sys.exit(result.exit_code(fail_on))


def _register_stage_commands():
    """Commands that live with their own stage: drills (fault-injection runs) and eval."""
    from ckptscan.drills.cli import drill
    from ckptscan.evaluate import eval_cmd

    main.add_command(drill)
    main.add_command(eval_cmd)


_register_stage_commands()


if __name__ == "__main__":  # pragma: no cover
    main()
