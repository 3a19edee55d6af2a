"""The ``hookviz`` command: a thin layer over the library.

Each command parses its options, calls one library function and maps the library's
errors to exit codes in one place (``command_errors``): 0 every image done, 1 some
images failed, 2 usage error, 3 a ``--fail-on`` check failed, 130 interrupted. The run
command's steps are ``run_command``'s.
Heavy modules (torch, matplotlib) are imported inside the commands, so ``--help``
answers at once.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from hookviz import __version__, run_command
from hookviz.command_errors import exit_code_for, guard
from hookviz.command_options import (
    LAYERS,
    MODEL,
    AtlasData,
    AtlasFromList,
    AtlasLabel,
    AtlasLabelWeights,
    AtlasLayers,
    AtlasMerge,
    AtlasRank,
    AtlasRelevance,
    AtlasResume,
    AtlasRule,
    AtlasSeconds,
    AtlasShard,
    AtlasSteps,
    AtlasVisualize,
    AtlasVocabulary,
    AtlasWeights,
    AtolOption,
    BaseArgument,
    DebugOption,
    DiffFailOnOption,
    DiffJsonOption,
    DiffOutOption,
    DiffPicturesOption,
    DiffQuietOption,
    MinCamCorrOption,
    ModelOption,
    NewArgument,
    PanelledCommand,
    PlainGroup,
    PromptOption,
    PromptsFileOption,
    RtolOption,
)
from hookviz.errors import HookvizError, UsageError
from hookviz.interrupts import Interrupted
from hookviz.options import MAX_SIDE, Tolerances
from hookviz.process import exit_with, plain_text_only, prepare
from hookviz.run_arguments import RunArgs, TypedCommand, given_prompts
from hookviz.run_command import given_sources, say_findings

__all__ = ["app", "main", "console_main", "exit_code_for"]

app = typer.Typer(
    name="hookviz",
    cls=PlainGroup,
    help="See what a PyTorch vision model computes inside: feature maps, gradients and CAMs.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

_DEFAULTS = Tolerances()


def _version(value: bool) -> None:
    if value:
        typer.echo(f"hookviz {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """See what a PyTorch vision model computes inside: feature maps, gradients and CAMs."""


# ----------------------------------------------------------------------------- run

# The command's parameters are RunArgs' fields and the settings that methods and tasks declare.
run = app.command("run", cls=PanelledCommand)(TypedCommand(RunArgs, run_command.run))


# ----------------------------------------------------------------------------- diff


@app.command(cls=PanelledCommand)
def diff(
    base: BaseArgument,
    new: NewArgument,
    fail_on: DiffFailOnOption = None,
    rtol: RtolOption = _DEFAULTS.rtol,
    atol: AtolOption = _DEFAULTS.atol,
    min_cam_corr: MinCamCorrOption = _DEFAULTS.min_cam_corr,
    pictures: DiffPicturesOption = "diff",
    out: DiffOutOption = None,
    json_output: DiffJsonOption = False,
    quiet: DiffQuietOption = False,
    debug: DebugOption = False,
) -> None:
    """Compare the run in NEW with the baseline run in BASE, image by image and layer by layer.

    Writes NEW/diff.json: per image the target and top-5 before and after; per
    layer each tensor's statistics and how far it moved (max absolute and relative
    difference, cosine: of the fingerprints every run keeps, and of the full
    tensors when both runs used --save-tensors), the CAM correlation and how many
    pixels its peak moved. Images and layers in one run only are named.
    Exit codes: 0 compared (no drift, or drift not checked), 3 drift with
    --fail-on drift, 2 a folder or file that cannot be compared.

    Example:

        hookviz diff ci/baseline hookviz-out --fail-on drift
    """

    def action():
        from hookviz.compare.diffing import diff_runs
        from hookviz.options import Tolerances

        if pictures not in ("diff", "none"):
            raise UsageError(f"--pictures {pictures}: choose diff or none")
        tolerances = Tolerances(rtol=rtol, atol=atol, min_cam_corr=min_cam_corr)
        return diff_runs(base, new, out=out, tolerances=tolerances, fail_on=fail_on or (), pictures=pictures == "diff")

    try:
        result = guard(debug, action)
    except (KeyboardInterrupt, Interrupted):
        typer.echo(f"hookviz: interrupted: the comparison was not finished; {out or new / 'diff.json'} not written", err=True)
        raise typer.Exit(130) from None
    _say_diff(result, out or new / "diff.json", quiet=quiet, json_output=json_output)
    if result.checked and result.findings:
        raise typer.Exit(3)


def _say_diff(result, path: Path, *, quiet: bool, json_output: bool) -> None:
    """What ``hookviz diff`` prints of a comparison written to ``path``: notes, the JSON, the findings."""
    for note in result.notes:
        if not quiet:
            typer.echo(f"hookviz: note: {note}", err=True)
    if json_output:
        import json

        typer.echo(json.dumps(result.to_json(), indent=2))
    if result.checked:
        say_findings(result.findings)
    if not quiet:
        verdict = f"{len(result.findings)} drift findings" if result.findings else "no drift beyond the tolerances"
        count = len(result.images)
        typer.echo(f"hookviz: compared {count} image{'s' if count != 1 else ''}: {verdict}; see {path}", err=True)


# ----------------------------------------------------------------------------- layers


@app.command(cls=PanelledCommand)
def layers(
    model: ModelOption = "resnet50",
    weights: Annotated[
        str, typer.Option(help="Weights to load first; none is enough to list layers.", rich_help_panel=MODEL)
    ] = "none",
    trust_checkpoint: Annotated[
        bool,
        typer.Option(
            "--trust-checkpoint",
            help="Load a checkpoint that runs code when loaded (yolo:PATH.pt, a pickle).",
            rich_help_panel=MODEL,
        ),
    ] = False,
    prompt: PromptOption = None,
    prompts: PromptsFileOption = None,
    filter: Annotated[
        Optional[str],
        typer.Option("--filter", help="Only paths containing this text or matching this glob.", rich_help_panel=LAYERS),
    ] = None,
    type: Annotated[
        Optional[str], typer.Option("--type", help="Only modules of this class (Conv2d).", rich_help_panel=LAYERS)
    ] = None,
    crop: Annotated[
        Optional[int],
        typer.Option(help="Side of the dummy input image (default: the size the model takes, else 224).", rich_help_panel=LAYERS),
    ] = None,
    debug: DebugOption = False,
) -> None:
    """List every module path of MODEL with its type, output shape, parameters and calls.

    Pass any path shown here to `hookviz run --layer`.

    Example:

        hookviz layers --model resnet50 --filter layer3
    """

    def action():
        from hookviz.options import ModelOptions

        if crop is not None and not 1 <= crop <= MAX_SIDE:
            raise UsageError(f"--crop {crop}: must be from 1 to {MAX_SIDE}")
        options = ModelOptions(model, weights, trust_checkpoint=trust_checkpoint, prompts=given_prompts(prompt, prompts))
        from hookviz.layer_listing import listed_layers, print_layers

        print_layers(listed_layers(options, crop, filter, type))

    guard(debug, action)


# ----------------------------------------------------------------------------- atlas


@app.command(cls=PanelledCommand)
def atlas(
    context: typer.Context,
    data: AtlasData = None,
    model: Annotated[Optional[str], typer.Option("--model", help="The model, as hookviz run takes it.")] = None,
    weights: AtlasWeights = "DEFAULT",
    seed: Annotated[int, typer.Option("--seed", help="Seeds random weights (--weights none).")] = 0,
    layer: AtlasLayers = None,
    top: Annotated[int, typer.Option("--top", help="Examples kept per channel.")] = 9,
    rank: AtlasRank = "max",
    out: Annotated[Optional[Path], typer.Option("--out", help="The atlas's folder.")] = None,
    from_list: AtlasFromList = None,
    shard: AtlasShard = None,
    skip_existing: AtlasResume = False,
    merge: AtlasMerge = None,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Samples per forward pass.")] = 32,
    frames: Annotated[Optional[int], typer.Option("--frames", help="Clips: frames per clip (default: the model's).")] = None,
    clips: Annotated[Optional[int], typer.Option("--clips", help="Clips: clips per video, each a sample (VIDEO#k).")] = None,
    device: Annotated[str, typer.Option("--device", help="cpu, cuda, cuda:N, mps or auto.")] = "cpu",
    relevance: AtlasRelevance = None,
    relevance_rule: AtlasRule = "gradient-x-activation",
    label_with: AtlasLabel = None,
    vocabulary: AtlasVocabulary = None,
    label_weights: AtlasLabelWeights = "DEFAULT",
    visualize: AtlasVisualize = 0,
    visualize_steps: AtlasSteps = 256,
    visualize_seconds: AtlasSeconds = None,
    quiet: Annotated[bool, typer.Option("--quiet", help="Print nothing but errors.")] = False,
    debug: DebugOption = False,
) -> None:
    """Map what each channel of LAYER responds to across a dataset: per channel its top-K
    examples (cropped to what the peak unit sees) and its statistics, in OUT/atlas.json,
    OUT/atlas.npz and pages (OUT/index.html). Only forward passes, streamed: memory does
    not grow with the dataset. --shard K/N splits the samples; the last shard to finish
    (or --merge OUT) writes the atlas of them all. --relevance ranks the examples by their
    contribution to a class too, --label-with names the channels, --visualize draws what
    excites them most.

    Example:

        hookviz atlas --model efficientnet_lite0 --layer _blocks.9 --top 9 photos/ --out atlas
    """
    given = dict(locals())
    given["written"] = {
        name for name in context.params if getattr(context.get_parameter_source(name), "name", "DEFAULT") != "DEFAULT"
    }
    result = guard(debug, lambda: _make_atlas(given))
    if not quiet:
        typer.echo("", err=True)
        _say_atlas(result)
    if result.failed:
        raise typer.Exit(1)


def _make_atlas(given: dict):
    """``hookviz atlas``'s work, from its arguments (``given``, by parameter name)."""
    from hookviz.atlas import AtlasRequest, make_atlas, merge_atlas, parse_shard
    from hookviz.atlas.request import RENDERING
    from hookviz.runs.cluster import resolve_device

    where = resolve_device(given["device"])
    rendering = {name: given[name] for group in RENDERING for name in group}
    say = None if given["quiet"] else _atlas_say
    if given["merge"] is not None:  # the shards' naming and visualising, but for the options written here
        written = {name: value for name, value in rendering.items() if name in given["written"]}
        return merge_atlas(given["merge"], where, given["batch_size"], say=say, **written)
    if given["model"] is None or given["out"] is None:
        raise UsageError("give --model and --out (or --merge DIR to merge shards)")
    chosen = {name: given[name] for name in ("model", "out", "weights", "seed", "top", "rank", "skip_existing", "batch_size")}
    request = AtlasRequest(
        layers=tuple(given["layer"] or ()), sources=tuple(given_sources(given["data"], given["from_list"])), device=where,
        shard=parse_shard(given["shard"]), sample_options=_clip_options(given["frames"], given["clips"]),
        relevance=given["relevance"], relevance_rule=given["relevance_rule"], say=say, **chosen, **rendering,
    )  # fmt: skip
    return make_atlas(request, None if given["quiet"] else _atlas_progress)


def _clip_options(frames: int | None, clips: int | None) -> tuple:
    """The video kind's options, when ``--frames`` or ``--clips`` is given (a photo model refuses them)."""
    from hookviz.samples import VideoOptions

    given = {name: value for name, value in (("frames", frames), ("clips", clips)) if value is not None}
    return (VideoOptions(**given),) if given else ()


def _atlas_progress(done: int, total: int) -> None:
    typer.echo(f"\rhookviz: atlas: {done}/{total} samples", err=True, nl=False)


def _atlas_say(line: str) -> None:
    """A line of the atlas's later steps (naming, visualising), on a line of its own."""
    typer.echo(f"\nhookviz: {line}", err=True, nl=False)


def _say_atlas(result) -> None:
    failed = f", {result.failed} could not be read (atlas.json lists them)" if result.failed else ""
    if result.written:
        typer.echo(f"hookviz: atlas of {result.samples} samples{failed}: {result.out / 'index.html'}", err=True)
    else:
        shards = ", ".join(map(str, result.waiting))
        typer.echo(f"hookviz: {result.samples} samples done{failed}; the atlas is written when shard {shards} end", err=True)


# ----------------------------------------------------------------------------- models


@app.command()
def models(
    filter: Annotated[Optional[str], typer.Option("--filter", help="Only names containing this text.")] = None,
    search: Annotated[
        Optional[str],
        typer.Option("--search", help="Only names whose name or description holds every word of TEXT, in any case."),
    ] = None,
) -> None:
    """List the model names hookviz can load, by task (classifiers, then segmentation, then
    detection models) and source: built-in ones, torchvision's, timm's (when timm is
    installed), the Hugging Face image classifiers in the local cache, and how to name your own.

    Each source starts with a line beginning with '#'; the names follow, one a line.

    Example:

        hookviz models --search "vit reg4"
    """

    def action():
        from hookviz.models.loading import list_sources

        listings = list_sources(filter, search)
        if filter and not search and not any(listing.names for listing in listings):
            raise UsageError(f"--filter {filter}: no model name contains it; run `hookviz models` to see them all")
        for listing in listings:
            count = f"{len(listing.names)} of {listing.total}" if (filter or search) else str(listing.total)
            plural = "" if (len(listing.names) if (filter or search) else listing.total) == 1 else "s"
            typer.echo(f"# {listing.source}: {listing.about}" + (f" [{count} name{plural}]" if listing.total else ""))
            for name, description in listing.names:
                typer.echo(f"{name}  ({description})" if description else name)

    guard(False, action)


def main() -> None:
    """The ``hookviz`` command in this process, with the speed tricks that belong to the
    command's own process (never to a library caller's)."""
    prepare()
    drawn = app.rich_markup_mode
    if plain_text_only():
        app.rich_markup_mode = None  # click's plain "Error: ..." lines, not rich's boxes and colours
    _load_plugins()
    try:
        app(prog_name="hookviz")
    finally:
        app.rich_markup_mode = drawn


def _load_plugins() -> None:
    """Plug-ins register their methods, tasks and picture kinds before the options are read,
    so that the options take their names and ``--help`` lists them (``hookviz.plugins``)."""
    from hookviz.plugins import ENVIRONMENT, load_plugins

    if os.environ.get(ENVIRONMENT) and os.getcwd() not in sys.path:
        # This process's own path (its render workers inherit it): they import the same
        # plug-ins from the current folder to draw their pictures.
        sys.path.insert(0, os.getcwd())
    try:
        if load_plugins():
            _ = run.__signature__  # a plug-in's setting whose flag the command has: one line now, not typer's traceback
    except HookvizError as error:
        typer.echo(f"hookviz: error: {error}", err=True)
        raise SystemExit(exit_code_for(error)) from None


def console_main() -> None:
    """The ``hookviz`` command's process (``hookviz.__main__`` calls it): ``main()``, then exit
    at once with its exit status (``process.exit_with``)."""
    exit_with(main)


if __name__ == "__main__":
    console_main()
