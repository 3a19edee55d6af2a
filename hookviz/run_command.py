"""The ``hookviz run`` command's steps: the sources and photos it is given, the run (of a
vision-language model or any other), Ctrl-C and SIGTERM while it runs, and its closing lines.

``cli`` registers ``run`` as the command; its parameters are ``RunArgs``' fields and the
settings that methods and tasks declare.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from pathlib import Path

import typer

from hookviz.command_errors import guard
from hookviz.errors import UsageError
from hookviz.interrupts import on_signal
from hookviz.process import Stopper, open_heif
from hookviz.progress import Progress, stopped_line
from hookviz.run_arguments import RunArgs, option_groups

__all__ = ["given_sources", "run", "say_findings"]


def run(args: RunArgs, declared: dict) -> None:
    """Record LAYERS of MODEL on IMAGES and write pictures and reports.

    Per image, in OUT/<image stem>/: <layer>.summary.png, <layer>.channels.png,
    <layer>.cam.png, input.jpg, report.json (and tensors.npz with --save-tensors);
    OUT/run.json describes the whole run and OUT/index.html shows it in a browser.
    --baseline BASE ends the run by comparing it with BASE (OUT/diff.json);
    --fail-on drift then exits 3 past --rtol, --atol or --min-cam-corr.
    --faithfulness and --sanity measure how far to trust each CAM.

    Example:

        hookviz run --model resnet50 --layer layer3.-1 cat.png
    """
    shown = args.output
    groups = guard(shown.debug, lambda: option_groups(args, declared))
    found: list[str] = []  # notes on what the folders held
    bound = bool(declared.get("input"))  # --input binds the inputs: the positional images may be among them
    sources = guard(shown.debug, lambda: given_sources(args.model.images, args.images.from_list, bound))
    paths = guard(shown.debug, lambda: _photos_in(sources, groups["options"].out, found))
    for note in () if shown.quiet else found:
        typer.echo(f"hookviz: note: {note}", err=True)
    if guard(shown.debug, lambda: _vision_language(paths, groups, args)):
        return
    guard(
        shown.debug,
        lambda: _execute(paths, sources, groups, json_output=shown.json_output, quiet=shown.quiet, verbose=shown.verbose),
    )


def _vision_language(paths, groups: dict, args: RunArgs) -> bool:
    """A vision-language model's run (``hookviz.runs.vlm_run``), when the model is one; ``False`` otherwise
    (its options refused for another model). Ctrl-C and SIGTERM stop it as they stop any run."""
    from hookviz.run_arguments import given_options
    from hookviz.runs import vlm_run

    v, shown = args.vlm, args.output
    if not vlm_run.is_vision_language_name(groups["model"].name):
        vlm_run.refuse_vlm_options(v.answer, v.max_new_tokens, v.tokens, v.words, v.dtype, groups["model"].name)
        return False
    request = vlm_run.request_of(groups, v.answer, v.max_new_tokens, v.tokens, v.words)
    vlm_run.refuse_unmet(given_options(args), groups)
    options = groups["options"]
    chosen = vlm_run.VlmOptions(
        v.dtype, groups["inputs"].max_pixels, options.save_tensors, options.command, options.skip_existing, options.shard
    )
    progress = Progress(len(paths), quiet=True, stdout_lines=False)  # what Stopper reads: whether the photos began

    def started(line: str) -> None:
        progress.start("")
        if not (shown.quiet or shown.json_output):
            typer.echo(f"hookviz: {line}", err=True)  # as a photo run's first line

    def said(status, line: str | None) -> None:
        progress.update(status, len(runner.statuses), len(paths))  # a failed photo's line, as a photo run says it
        if status.status == "done" and line and not (shown.quiet or shown.json_output):
            typer.echo(f"{status.image}: {line}")  # as a photo run says its target and top-5

    with _stopped_by_signals(progress) as stopper:
        stopper.run = runner = vlm_run.VlmRunner(
            groups["model"], paths, request, options.out, options=chosen, on_start=started, on_photo=said
        )
        summary = runner.execute()
    _end_of_run(summary, progress, options.out, quiet=shown.quiet, json_output=shown.json_output)
    return True


@contextlib.contextmanager
def _stopped_by_signals(progress: Progress):
    """Ctrl-C and SIGTERM handed to the run set as the ``Stopper``'s ``run`` in the block; a run
    that ends interrupted (``RunInterrupted``) says so in one line and exits 130."""
    from hookviz.runs.summary import RunInterrupted

    stopper = Stopper(progress)
    previous = {number: signal.signal(number, stopper) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stopper
    except RunInterrupted as stop:
        progress.close()
        typer.echo(stopped_line(stop.summary, progress.stopped_while()), err=True)
        raise typer.Exit(130) from None
    finally:
        # Once a stop was asked for, further Ctrl-C's only mean "stop": the command is ending, and
        # a KeyboardInterrupt thrown into its last steps (exit handlers) would print a traceback.
        # In the command's own process, a run that ended has nothing left to stop either.
        for number, handler in previous.items():
            signal.signal(number, signal.SIG_IGN if stopper.signals or handler is on_signal else handler)
        progress.close()


def given_sources(images: list[str] | None, from_list: str | None, bound: bool = False) -> list[str]:
    """The files, folders and patterns given, then those of ``--from-list`` (none, when ``--input`` binds every input)."""
    from hookviz.inputs.discovery import read_list

    sources = list(images or [])
    if from_list:
        try:
            stream = sys.stdin if from_list == "-" else open(from_list, encoding="utf-8", errors="surrogateescape")
        except OSError as exc:
            raise UsageError(f"--from-list {from_list}: cannot read ({exc.strerror})") from None
        with stream if stream is not sys.stdin else contextlib.nullcontext(stream):
            listed = read_list(stream)
        if any("\0" in line for line in listed):  # a binary file: every path test would raise ValueError
            raise UsageError(
                f"--from-list {from_list}: holds a NUL byte, which no path has; give a text file of paths, one a line"
            )
        sources += listed
    if not sources and not bound:
        raise UsageError("no images given: pass image files, folders or patterns (or --from-list FILE)")
    if "" in sources:  # a path reads '' as the working folder: an unset "$PHOTO" would explain all of it
        raise UsageError("an empty image argument (''): give an image file, a folder (. for this one) or a pattern")
    return sources


def _photos_in(sources: list[str], out: Path, notes: list[str]) -> list[Path]:
    """The photos ``sources`` name, found while torch imports (the loader decodes them
    meanwhile); none yet where they name none but a plug-in's sample kind may find its own
    there: the run finds the samples of the model's kind once it is loaded (``Run``'s ``sources``)."""
    open_heif()  # before discovery reads the suffixes PIL knows
    from hookviz.inputs.discovery import NothingFound, find_images
    from hookviz.samples import SAMPLE_KINDS

    if not sources:
        return []
    try:
        return find_images(sources, exclude=[out], notes=notes)
    except NothingFound:  # an --out among the photos is refused at once, whatever the model
        if any(name != "photo" for name in SAMPLE_KINDS.names()):
            return []
        raise


def _execute(paths, sources, groups: dict, *, json_output: bool, quiet: bool, verbose: bool) -> None:
    from hookviz.models.loading import prompt_progress
    from hookviz.runs.runner import Run, shard_of
    from hookviz.samples import counted_noun
    from hookviz.workload import listening

    count = len(shard_of(paths, groups["options"].shard))
    progress = Progress(count, quiet=quiet or json_output, stdout_lines=not (quiet or json_output), verbose=verbose)
    with _stopped_by_signals(progress) as stopper:
        # the model's sample kind may find other samples in the sources than these photos: count those
        runner: Run

        def start(line: str) -> None:
            explainer = runner.explainer
            assert explainer is not None  # the run starts once its model is loaded
            progress.start(line, len(runner.asked.selected), counted_noun(explainer.kind), explainer.kind.noun)

        stopper.run = runner = Run(paths, **groups, on_status=progress.update, on_start=start, sources=sources)
        # ten thousand prompts take minutes before the first image; so may the work inside a photo
        with prompt_progress(progress.prompts), listening(progress):
            summary = runner.execute()
    _end_of_run(summary, progress, groups["options"].out, quiet=quiet, json_output=json_output)


def _end_of_run(summary, progress: Progress, out: Path, *, quiet: bool, json_output: bool) -> None:
    """A run's closing lines, whatever its model (``--json``'s run file, its notes and findings, the
    photos that failed, how many were done), and its exit status: 1 when a photo failed, 3 on a finding."""
    for note in summary.notes:
        if not quiet:
            typer.echo(f"hookviz: note: {note}", err=True)
    if json_output:
        progress.say(summary.run_json.read_text(encoding="utf-8"), nl=False)
    say_findings(summary.findings)
    done, skipped, failed = summary.count("done"), summary.count("skipped"), len(summary.failed)
    if failed:
        names = ", ".join(s.image for s in summary.failed[:10]) + (", ..." if failed > 10 else "")
        typer.echo(
            f"hookviz: {failed} of {len(summary.statuses)} {summary.noun}s failed: {names}; reasons in {summary.run_json}",
            err=True,
        )
    if not quiet and not json_output:
        counts = [f"{done} of {len(summary.statuses)} {summary.noun}s done"]
        counts += [f"{skipped} skipped (done by an earlier run)"] if skipped else []
        counts += [f"{failed} failed"] if failed else []
        counts += [f"{summary.count('not_done')} not done"] if summary.count("not_done") else []
        typer.echo(f"hookviz: {', '.join(counts)}; results in {out}/", err=True)
    if failed:
        raise typer.Exit(1)
    if summary.findings:
        raise typer.Exit(3)


def say_findings(findings) -> None:
    """One line per finding on stderr, naming image, layer and (for drift) the figure."""
    for finding in findings:
        where = f" {finding.layer}" if finding.layer else ""
        figure = f" [{finding.figure}]" if finding.figure else ""
        typer.echo(f"hookviz: check {finding.check} failed: {finding.image}{where}{figure}: {finding.detail}", err=True)
