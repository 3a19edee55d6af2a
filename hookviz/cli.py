"""The ``hookviz`` command: a thin layer over the library.

Each command parses its options, calls one library function and maps the library's
errors to exit codes in one place (``_exit_code_for``): 0 every image done, 1 some
images failed, 2 usage error, 3 a ``--fail-on`` check failed, 130 interrupted.
Heavy modules (torch, matplotlib) are imported inside the commands, so ``--help``
answers at once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from . import __version__
from .errors import HookvizError, UsageError, describe

app = typer.Typer(
    name="hookviz",
    help="See what a PyTorch vision model computes inside: feature maps, gradients and CAMs.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

# Options shared by several commands, defined once.
ModelOption = Annotated[
    str,
    typer.Option(
        "--model", "-m",
        help="torchvision model name (resnet50), built-in (efficientnet_lite0) or package.module:callable.",
    ),
]
WeightsOption = Annotated[
    str,
    typer.Option(
        help="DEFAULT (pretrained), none (random init), a torchvision weights name, or a state_dict file (.pth/.safetensors).",
    ),
]
SeedOption = Annotated[int, typer.Option(help="Seed for random initialisation (--weights none).")]
DebugOption = Annotated[bool, typer.Option("--debug", help="Show tracebacks instead of one-line errors.")]


def _version(value: bool) -> None:
    if value:
        typer.echo(f"hookviz {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        Optional[bool], typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = None,
) -> None:
    """See what a PyTorch vision model computes inside: feature maps, gradients and CAMs."""


def _fail(message: str, code: int) -> None:
    typer.echo(f"hookviz: error: {message}", err=True)
    raise typer.Exit(code)


def _exit_code_for(error: BaseException) -> int:
    if isinstance(error, HookvizError):
        return error.exit_code
    return 1


class _Terminated(KeyboardInterrupt):
    """SIGTERM, turned into the same clean stop as Ctrl-C."""


def _on_sigterm(_signum, _frame):
    raise _Terminated()


def _guard(debug: bool, action):
    """Run ``action``; turn hookviz's errors into one line and an exit code."""
    try:
        return action()
    except typer.Exit:
        raise
    except HookvizError as error:
        if debug:
            raise
        _fail(str(error), _exit_code_for(error))
    except Exception as error:  # a bug or a foreign model's failure: one line, unless --debug
        if debug:
            raise
        _fail(f"{describe(error)} (rerun with --debug for the traceback)", 1)


# ----------------------------------------------------------------------------- run


@app.command()
def run(
    images: Annotated[
        Optional[list[str]],
        typer.Argument(help="Image files, directories (searched recursively) or quoted glob patterns.", show_default=False),
    ] = None,
    model: ModelOption = "resnet50",
    weights: WeightsOption = "DEFAULT",
    seed: SeedOption = 0,
    layer: Annotated[
        Optional[list[str]],
        typer.Option("--layer", "-l", help="Layer path, repeatable: layer3.-1, features.18, layer3.5.relu:1, 'layer*.0.conv2'."),
    ] = None,
    layer_type: Annotated[
        Optional[list[str]], typer.Option("--layer-type", help="Every module of this class, repeatable: Conv2d.")
    ] = None,
    target: Annotated[str, typer.Option(help="top1, a class index, or a class name (tabby).")] = "top1",
    objective: Annotated[str, typer.Option(help="logit: back-propagate the target's logit; ce: cross-entropy.")] = "logit",
    cam: Annotated[str, typer.Option(help="gradcam, gradcam++, layercam or none.")] = "gradcam",
    topk: Annotated[int, typer.Option(help="Also draw the CAMs of the top K classes side by side.")] = 1,
    channels: Annotated[str, typer.Option(help="Channel grid: the N most active (64), a range (0-15) or a list (3,7,9).")] = "64",
    scale: Annotated[str, typer.Option(help="Channel grid colour scale: tile (each its own) or shared.")] = "tile",
    grad_channels: Annotated[bool, typer.Option("--grad-channels", help="Also draw the grid of grad_output channels.")] = False,
    pictures: Annotated[str, typer.Option(help="Pictures to write: summary,channels,cam or none.")] = "summary,channels,cam",
    save_tensors: Annotated[bool, typer.Option("--save-tensors", help="Write tensors.npz with every recorded array.")] = False,
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder; one sub-folder per image.")] = Path("hookviz-out"),
    resize: Annotated[Optional[int], typer.Option(help="Resize the shorter side to this (default: the weights' own, else 256).", min=1)] = None,
    crop: Annotated[Optional[int], typer.Option(help="Centre-crop to this square (default 224).", min=1)] = None,
    mean: Annotated[Optional[str], typer.Option(help="Normalisation mean, r,g,b.")] = None,
    std: Annotated[Optional[str], typer.Option(help="Normalisation std, r,g,b.")] = None,
    no_crop: Annotated[bool, typer.Option("--no-crop", help="Resize the whole photo to the input size instead of cropping.")] = False,
    batch_size: Annotated[int, typer.Option(help="Most images per forward pass (fewer at the start of a run, and when recording them would pass 256 MB).", min=1)] = 8,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda, cuda:N or mps.")] = "auto",
    from_list: Annotated[Optional[str], typer.Option("--from-list", help="Read image paths, one a line, from FILE (- for stdin).")] = None,
    skip_existing: Annotated[bool, typer.Option("--skip-existing", help="Skip images whose report.json exists (resume a run).")] = False,
    shard: Annotated[Optional[str], typer.Option(help="K/N: process the K-th of N slices of the image list (job arrays).")] = None,
    max_pixels: Annotated[int, typer.Option(help="Refuse images with more pixels than this (decompression bombs).", min=1)] = 100_000_000,
    fail_on: Annotated[Optional[str], typer.Option("--fail-on", help="Exit 3 when a check fails: nonfinite,dead,zero-grad.")] = None,
    dead_fraction: Annotated[float, typer.Option(help="'dead' means at least this fraction of an output is zero.", min=0.0, max=1.0)] = 1.0,
    tensorboard: Annotated[Optional[Path], typer.Option(help="Also log pictures, scalars and histograms to this TensorBoard log folder.")] = None,
    workers: Annotated[int, typer.Option(help="Rendering processes (0: one per CPU).", min=0)] = 0,
    json_output: Annotated[bool, typer.Option("--json", help="Print run.json to stdout (for jq).")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing but errors.")] = False,
    debug: DebugOption = False,
) -> None:
    """Record LAYERS of MODEL on IMAGES and write pictures and reports.

    Per image, in OUT/<image stem>/: <layer>.summary.png, <layer>.channels.png,
    <layer>.cam.png, input.jpg, report.json (and tensors.npz with --save-tensors);
    OUT/run.json describes the whole run and OUT/index.html shows it in a browser.

    Example:

        hookviz run --model resnet50 --layer layer3.-1 cat.png
    """
    args = dict(locals())
    config, paths = _guard(debug, lambda: _run_config(args))
    _guard(debug, lambda: _execute(config, paths, json_output=json_output, quiet=quiet))


def _run_config(args: dict):
    from .checks import parse_checks
    from .explaining import ExplainOptions
    from .images import find_images, parse_triple, read_list
    from .summaries import parse_channels
    from .runner import PICTURES, RunConfig

    sources = list(args["images"] or [])
    if args["from_list"]:
        try:
            stream = sys.stdin if args["from_list"] == "-" else open(args["from_list"], encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"--from-list {args['from_list']}: cannot read ({exc.strerror})") from None
        with stream if stream is not sys.stdin else contextlib.nullcontext(stream):
            sources += read_list(stream)
    if not sources:
        raise UsageError("no images given: pass image files, folders or patterns (or --from-list FILE)")
    pictures = tuple(p.strip() for p in args["pictures"].split(",") if p.strip())
    if pictures == ("none",):
        pictures = ()
    for picture in pictures:
        if picture not in PICTURES:
            raise UsageError(f"--pictures {picture}: choose from {', '.join(PICTURES)}, or none")
    if args["scale"] not in ("tile", "shared"):
        raise UsageError(f"--scale {args['scale']}: choose tile or shared")
    parse_channels(args["channels"])
    if args["topk"] > 1 and args["cam"] == "none":
        raise UsageError("--topk needs a CAM method; drop --cam none")
    shard = _parse_shard(args["shard"]) if args["shard"] else None
    config = RunConfig(
        model=args["model"],
        weights=args["weights"],
        seed=args["seed"],
        layers=tuple(args["layer"] or ()),
        layer_types=tuple(args["layer_type"] or ()),
        explain=ExplainOptions(
            target=args["target"], objective=args["objective"], cam=args["cam"], topk=args["topk"]
        ).checked(),
        resize=args["resize"],
        crop=args["crop"],
        mean=parse_triple(args["mean"], "--mean") if args["mean"] else None,
        std=parse_triple(args["std"], "--std") if args["std"] else None,
        whole_image=args["no_crop"],
        out=args["out"],
        pictures=pictures,
        save_tensors=args["save_tensors"],
        channels=args["channels"],
        scale=args["scale"],
        grad_channels=args["grad_channels"],
        batch_size=args["batch_size"],
        device=args["device"],
        skip_existing=args["skip_existing"],
        shard=shard,
        max_pixels=args["max_pixels"],
        fail_on=parse_checks(args["fail_on"]),
        dead_fraction=args["dead_fraction"],
        tensorboard=args["tensorboard"],
        workers=args["workers"],
        command=tuple(sys.argv),
    )
    return config, find_images(sources)


def _parse_shard(text: str) -> tuple[int, int]:
    try:
        k, n = (int(v) for v in text.split("/"))
    except ValueError:
        raise UsageError(f"--shard {text}: expected K/N, such as 1/4") from None
    if n < 1 or not 1 <= k <= n:
        raise UsageError(f"--shard {text}: K must be between 1 and N")
    return k, n


def _execute(config, paths, *, json_output: bool, quiet: bool) -> None:
    from .runner import RunInterrupted, run

    progress = _Progress(len(paths), quiet=quiet or json_output, stdout_lines=not (quiet or json_output))
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        summary = run(config, paths, on_status=progress.update, on_start=progress.start)
    except RunInterrupted as stop:
        progress.close()
        summary = stop.summary
        typer.echo(
            f"hookviz: interrupted: {summary.count('done')} images written, {len(summary.failed)} failed; "
            f"see {summary.run_json} (rerun with --skip-existing to resume)",
            err=True,
        )
        raise typer.Exit(130) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
        progress.close()
    for note in summary.notes:
        if not quiet:
            typer.echo(f"hookviz: {note}", err=True)
    if json_output:
        typer.echo(summary.run_json.read_text(encoding="utf-8"), nl=False)
    for finding in summary.findings:
        where = f" {finding.layer}" if finding.layer else ""
        typer.echo(f"hookviz: check {finding.check} failed: {finding.image}{where}: {finding.detail}", err=True)
    done, failed = summary.count("done") + summary.count("skipped"), len(summary.failed)
    if failed:
        names = ", ".join(s.image for s in summary.failed[:10]) + (", ..." if failed > 10 else "")
        typer.echo(f"hookviz: {failed} of {len(summary.statuses)} images failed: {names}; reasons in {summary.run_json}", err=True)
    if not quiet and not json_output:
        typer.echo(f"hookviz: {done} of {len(summary.statuses)} images done; results in {config.out}/", err=True)
    if failed:
        raise typer.Exit(1)
    if summary.findings:
        raise typer.Exit(3)


def _probability(value: float | None) -> str:
    return "nan" if value is None else f"{value:.3f}"


class _Progress:
    """A rich progress bar on a terminal; one plain line per image otherwise."""

    def __init__(self, total: int, *, quiet: bool, stdout_lines: bool):
        self.total = total
        self.quiet = quiet
        self.stdout_lines = stdout_lines
        self.bar = None
        self.task = None

    def start(self, line: str) -> None:
        if self.quiet:
            return
        typer.echo(f"hookviz: {line}", err=True)
        if sys.stderr.isatty() and self.total > 1:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(
                TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[rate]}"), TimeRemainingColumn(), console=Console(stderr=True),
                transient=True,
            )
            self.bar.start()
            self.task = self.bar.add_task("images", total=self.total, rate="")

    def update(self, status, finished: int, total: int) -> None:
        if status.status == "failed":  # errors are shown even with --quiet, as they happen
            if self.bar is not None:
                self.bar.console.print(f"hookviz: failed: {status.error}", markup=False, highlight=False)
            else:
                typer.echo(f"hookviz: failed: {status.error}", err=True)
        if self.bar is not None:
            elapsed = self.bar.tasks[0].elapsed or 0.0
            rate = f"{finished / elapsed:.2f} img/s" if elapsed > 0 else ""
            self.bar.update(self.task, completed=finished, rate=rate)
        if self.quiet or not self.stdout_lines:
            return
        if status.status == "done":
            top = " · ".join(f"{s['name'] or s['index']} {_probability(s['probability'])}" for s in status.top5)
            target = status.target or {}
            line = f"{status.image}: target {target.get('name') or target.get('index')}; top-5: {top}"
            if self.bar is not None and sys.stdout.isatty():
                self.bar.console.print(line, markup=False, highlight=False, soft_wrap=True)  # above the bar
            else:
                typer.echo(line)  # stdout, also when it is piped to a file


    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


# ----------------------------------------------------------------------------- layers


@app.command()
def layers(
    model: ModelOption = "resnet50",
    weights: Annotated[str, typer.Option(help="Weights to load first; none is enough to list layers.")] = "none",
    filter: Annotated[Optional[str], typer.Option("--filter", help="Only paths containing this text or matching this glob.")] = None,
    type: Annotated[Optional[str], typer.Option("--type", help="Only modules of this class (Conv2d).")] = None,
    crop: Annotated[int, typer.Option(help="Side of the dummy input image.", min=1)] = 224,
    debug: DebugOption = False,
) -> None:
    """List every module path of MODEL with its type, output shape, parameters and calls.

    Pass any path shown here to `hookviz run --layer`.

    Example:

        hookviz layers --model resnet50 --filter layer3
    """

    def action():
        import fnmatch

        from .layers import trace
        from .models import load_model

        loaded = load_model(model, weights)
        rows = trace(loaded.module, (crop, crop))
        if filter:
            rows = [r for r in rows if filter in r.path or fnmatch.fnmatchcase(r.path, filter)]
        if type:
            rows = [r for r in rows if r.module_type == type]
        if not rows:
            raise UsageError("no layer matches --filter/--type; run without them to see all")
        width = max(len(r.path) for r in rows)
        type_width = max(len(r.module_type) for r in rows)
        typer.echo(f"{'path':<{width}}  {'type':<{type_width}}  {'output shape':<22}  {'params':>11}  calls")
        for r in rows:
            shapes = sorted({"x".join(map(str, s)) if s else "-" for s in r.output_shapes})
            shape = ", ".join(shapes) if shapes else "(not called)"
            typer.echo(f"{r.path:<{width}}  {r.module_type:<{type_width}}  {shape:<22}  {r.parameters:>11,}  {r.calls}")

    _guard(debug, action)


# ----------------------------------------------------------------------------- models


@app.command()
def models(
    filter: Annotated[Optional[str], typer.Option("--filter", help="Only names containing this text.")] = None,
) -> None:
    """List the model names hookviz can load: built-in ones, then torchvision's classifiers.

    Example:

        hookviz models --filter resnet
    """
    from .models import _BUILTINS, torchvision_names

    for name, entry in sorted(_BUILTINS.items()):
        if not filter or filter in name:
            typer.echo(f"{name}  (built-in: {entry.description})")
    for name in torchvision_names():
        if not filter or filter in name:
            typer.echo(name)


def main() -> None:
    # torch's OpenMP threads otherwise spin after each operation, taking CPU from the
    # render workers: measured over 32 photos on 2 cores, a run with pictures finished ~8%
    # sooner with this, and one without pictures no later. A value you set is kept.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    app(prog_name="hookviz")


def console_main() -> None:
    """The installed ``hookviz`` command (and ``python -m hookviz``): ``main()``, then exit
    at once with its exit status.

    When a command returns, every file it wrote is complete and closed, and its worker
    processes and threads have finished. A normal interpreter shutdown would then spend
    0.15 s to 0.7 s (measured on 2 cores) freeing the objects torch and torchvision
    create at import, which the operating system reclaims anyway; so only the output
    streams are flushed. An unexpected exception still gets Python's usual exit.
    """
    try:
        main()
        status = 0
    except SystemExit as exit:
        status = exit.code
    if status is None:
        status = 0
    elif not isinstance(status, int):
        print(status, file=sys.stderr)
        status = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (hookviz models | head): nothing to save
            pass
    os._exit(status)


if __name__ == "__main__":
    console_main()
