"""The ``hookviz`` command's options: the declarations several commands share (typer
``Annotated`` types), ``--cam``'s help and completions (read from the method registry), and
``hookviz run``'s parsed values turned into the option groups the library takes."""

from __future__ import annotations

import inspect
import sys
import typing
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from typer.core import TyperCommand

from hookviz.options import DEFAULT_MAX_PIXELS, MAX_SIDE, MAX_TOPK, Tolerances
from hookviz.progress import FEW_IMAGES

_TOLERANCES = Tolerances()

__all__ = [
    "PANELS",
    "PanelledCommand",
    "help_panels",
    "MODEL",
    "LAYERS",
    "TARGET",
    "METHODS",
    "TRUST",
    "PICTURES",
    "IMAGES",
    "RUN",
    "OUTPUT",
    "given_prompts",
    "option_groups",
    "RunArgs",
    "TypedCommand",
    "declared_parameters",
    "task_help",
    "pictures_help",
    "default_pictures",
    "ModelOption",
    "WeightsOption",
    "SeedOption",
    "PromptOption",
    "PromptsFileOption",
    "DebugOption",
    "RtolOption",
    "AtolOption",
    "MinCamCorrOption",
    "ImagesArgument",
    "BaseArgument",
    "NewArgument",
    "DiffFailOnOption",
    "DiffPicturesOption",
    "DiffOutOption",
    "DiffJsonOption",
    "DiffQuietOption",
    "LayerOption",
    "LayerTypeOption",
    "LayoutOption",
    "cam_help",
    "cam_completions",
    "TargetOption",
    "ObjectiveOption",
    "TopkOption",
    "OutputKeyOption",
    "TrustCheckpointOption",
    "ChannelsOption",
    "ScaleOption",
    "GradChannelsOption",
    "SaveTensorsOption",
    "OutOption",
    "ResizeOption",
    "CropOption",
    "MeanOption",
    "StdOption",
    "NoCropOption",
    "BatchSizeOption",
    "DeviceOption",
    "FromListOption",
    "SkipExistingOption",
    "ShardOption",
    "MaxPixelsOption",
    "FailOnOption",
    "DeadFractionOption",
    "BaselineOption",
    "TensorboardOption",
    "WorkersOption",
    "FaithfulnessOption",
    "SanityOption",
    "JsonOutputOption",
    "QuietOption",
    "VerboseOption",
]

# The panels ``--help`` groups the options in (typer's ``rich_help_panel``), in the order ``hookviz
# run`` lists them; an option keeps its panel in every command that takes it.
PANELS = ("Model", "Layers", "Target", "Methods", "Trust and checks", "Pictures", "Images", "Run", "Output")
MODEL, LAYERS, TARGET, METHODS, TRUST, PICTURES, IMAGES, RUN, OUTPUT = PANELS


def help_panels(command: Any, ctx: Any) -> dict[str, list[tuple[str, str]]]:
    """A click ``command``'s help records (names, meaning) by panel, in the order ``--help`` shows
    them: arguments and options without a panel first, as typer's rich help puts them. (Typed
    ``Any``: typer may carry its own copy of click.)"""
    panels: dict[str, list[tuple[str, str]]] = {"Arguments": [], "Options": []}
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is not None:
            unnamed = "Arguments" if param.param_type_name == "argument" else "Options"
            panels.setdefault(getattr(param, "rich_help_panel", None) or unnamed, []).append(record)
    return {title: records for title, records in panels.items() if records}


class PanelledCommand(TyperCommand):
    """A command whose plain-text ``--help`` (NO_COLOR, a dumb terminal: ``process.plain_text_only``)
    lists its options under their panels' titles too, as rich's boxes do."""

    def format_options(self, ctx: Any, formatter: Any) -> None:
        for title, records in help_panels(self, ctx).items():
            with formatter.section(title):
                formatter.write_dl(records)


ModelOption = Annotated[
    str,
    typer.Option(
        "--model",
        "-m",
        help="torchvision model name (resnet50), built-in (efficientnet_lite0), timm:NAME, hf:ORG/NAME, open_clip:ARCH or open_clip:ARCH/TAG, or package.module:callable.",
        rich_help_panel=MODEL,
    ),
]
WeightsOption = Annotated[
    str,
    typer.Option(
        help="DEFAULT (pretrained), none (random init), a torchvision weights name, or a state_dict file (.pth/.safetensors).",
        rich_help_panel=MODEL,
    ),
]
SeedOption = Annotated[int, typer.Option(help="Seed for random initialisation (--weights none).", rich_help_panel=MODEL)]
PromptOption = Annotated[
    Optional[list[str]],
    typer.Option(
        "--prompt", help="CLIP models (open_clip:ARCH): a text prompt, one class each; repeatable.", rich_help_panel=MODEL
    ),
]
PromptsFileOption = Annotated[
    Optional[list[str]],
    typer.Option(
        "--prompts",
        help="CLIP models: a text file of prompts, one a line; repeatable, read in order after the --prompt texts.",
        rich_help_panel=MODEL,
    ),
]
DebugOption = Annotated[bool, typer.Option("--debug", help="Show tracebacks instead of one-line errors.", rich_help_panel=OUTPUT)]
RtolOption = Annotated[
    float,
    typer.Option(
        help="Drift: a forward tensor may differ from the baseline by atol + rtol x its largest |value| in the baseline.",
        rich_help_panel=TRUST,
    ),
]
AtolOption = Annotated[float, typer.Option(help="Drift: the absolute part of that allowance.", rich_help_panel=TRUST)]
MinCamCorrOption = Annotated[
    float,
    typer.Option(
        "--min-cam-corr", help="Drift: a CAM's correlation with the baseline's must be at least this.", rich_help_panel=TRUST
    ),
]


# hookviz diff's own
BaseArgument = Annotated[
    Path, typer.Argument(metavar="BASE", help="The baseline: an earlier run's output folder (only read).", show_default=False)
]
NewArgument = Annotated[
    Path,
    typer.Argument(
        metavar="NEW", help="The run to compare with it (its image folders get <layer>.diff.png).", show_default=False
    ),
]
DiffFailOnOption = Annotated[
    Optional[str],
    typer.Option("--fail-on", help="drift: exit 3 when a compared figure passes its tolerance.", rich_help_panel=TRUST),
]
DiffPicturesOption = Annotated[
    str,
    typer.Option(
        help="diff: draw <layer>.diff.png into NEW's image folders and show them in NEW/index.html; none: only diff.json.",
        rich_help_panel=PICTURES,
    ),
]
DiffOutOption = Annotated[
    Optional[Path], typer.Option("--out", "-o", help="Where to write diff.json (default NEW/diff.json).", rich_help_panel=OUTPUT)
]
DiffJsonOption = Annotated[bool, typer.Option("--json", help="Print diff.json to stdout (for jq).", rich_help_panel=OUTPUT)]
DiffQuietOption = Annotated[
    bool, typer.Option("--quiet", "-q", help="Print nothing but errors and findings.", rich_help_panel=OUTPUT)
]


ImagesArgument = Annotated[
    Optional[list[str]],
    typer.Argument(
        help="Image files, folders (searched recursively, skipping hidden and output folders) or quoted glob patterns.",
        show_default=False,
    ),
]
LayerOption = Annotated[
    Optional[list[str]],
    typer.Option(
        "--layer",
        "-l",
        help="Layer path, repeatable: layer3.-1, features.18, layer3.5.relu:1, 'layer*.0.conv2'.",
        rich_help_panel=LAYERS,
    ),
]
LayerTypeOption = Annotated[
    Optional[list[str]],
    typer.Option("--layer-type", help="Every module of this class, repeatable: Conv2d.", rich_help_panel=LAYERS),
]
LayoutOption = Annotated[
    str,
    typer.Option(
        help="nchw or nhwc: how to read a map whose shape fits both orders (1x96x96x96) when neither the model nor "
        "the ops that made it say which; auto: no CAM for it, and a note.",
        rich_help_panel=LAYERS,
    ),
]


# hookviz run's own options (--cam, --task and --pictures stay in ``cli.run``: their help is read
# from registries each time typer builds the command).
TargetOption = Annotated[str, typer.Option(help="top1, a class index, or a class name (tabby).", rich_help_panel=TARGET)]
ObjectiveOption = Annotated[
    str, typer.Option(help="logit: back-propagate the target's logit; ce: cross-entropy.", rich_help_panel=TARGET)
]
TopkOption = Annotated[
    int,
    typer.Option(help=f"Also draw the CAMs of the top K classes side by side (K at most {MAX_TOPK}).", rich_help_panel=TARGET),
]
OutputKeyOption = Annotated[
    Optional[str],
    typer.Option(
        "--output-key",
        help="Which entry of the model's output holds the logits (a dict key or a tuple index), when it returns several.",
        rich_help_panel=TARGET,
    ),
]
TrustCheckpointOption = Annotated[
    bool,
    typer.Option(
        "--trust-checkpoint",
        help="Load a checkpoint that runs code when loaded (yolo:PATH.pt, a pickle); only for files you trust.",
        rich_help_panel=MODEL,
    ),
]
ChannelsOption = Annotated[
    str, typer.Option(help="Channel grid: the N most active (64), a range (0-15) or a list (3,7,9).", rich_help_panel=PICTURES)
]
ScaleOption = Annotated[
    str, typer.Option(help="Channel grid colour scale: tile (each its own) or shared.", rich_help_panel=PICTURES)
]
GradChannelsOption = Annotated[
    bool, typer.Option("--grad-channels", help="Also draw the grid of grad_output channels.", rich_help_panel=PICTURES)
]
SaveTensorsOption = Annotated[
    bool, typer.Option("--save-tensors", help="Write tensors.npz with every recorded array.", rich_help_panel=OUTPUT)
]
OutOption = Annotated[str, typer.Option("--out", "-o", help="Output folder; one sub-folder per image.", rich_help_panel=OUTPUT)]
ResizeOption = Annotated[
    Optional[int],
    typer.Option(
        help=f"Resize the shorter side to this (default: the weights' own, else 256; at most {MAX_SIDE}).", rich_help_panel=IMAGES
    ),
]
CropOption = Annotated[Optional[int], typer.Option(help="Centre-crop to this square (default 224).", rich_help_panel=IMAGES)]
MeanOption = Annotated[Optional[str], typer.Option(help="Normalisation mean, r,g,b.", rich_help_panel=IMAGES)]
StdOption = Annotated[Optional[str], typer.Option(help="Normalisation std, r,g,b.", rich_help_panel=IMAGES)]
NoCropOption = Annotated[
    bool, typer.Option("--no-crop", help="Resize the whole photo to the input size instead of cropping.", rich_help_panel=IMAGES)
]
BatchSizeOption = Annotated[
    int,
    typer.Option(
        help="Most images per forward pass (fewer at the start of a run, and when recording them would pass 256 MB).",
        rich_help_panel=RUN,
    ),
]
DeviceOption = Annotated[str, typer.Option(help="auto, cpu, cuda, cuda:N or mps.", rich_help_panel=RUN)]
FromListOption = Annotated[
    Optional[str],
    typer.Option("--from-list", help="Read image paths, one a line, from FILE (- for stdin).", rich_help_panel=IMAGES),
]
SkipExistingOption = Annotated[
    bool,
    typer.Option(
        "--skip-existing",
        help="Skip images whose folder holds complete results for these layers and pictures (resume a run).",
        rich_help_panel=RUN,
    ),
]
ShardOption = Annotated[
    Optional[str],
    typer.Option(
        help="K/N: process the K-th of N slices of the image list; auto: the Slurm array task's slice (torchrun's processes take theirs unasked).",
        rich_help_panel=RUN,
    ),
]
MaxPixelsOption = Annotated[
    int,
    typer.Option(
        help="Refuse images with more pixels than this, decoded or resized (decompression bombs).", rich_help_panel=IMAGES
    ),
]
FailOnOption = Annotated[
    Optional[str],
    typer.Option(
        "--fail-on",
        help="Exit 3 when a check fails: nonfinite,dead,zero-grad,drift (drift needs --baseline).",
        rich_help_panel=TRUST,
    ),
]
DeadFractionOption = Annotated[
    float, typer.Option(help="'dead' means at least this fraction of an output is zero.", rich_help_panel=TRUST)
]
BaselineOption = Annotated[
    Optional[str],
    typer.Option(
        help="An earlier run's output folder: end by comparing with it (OUT/diff.json, <layer>.diff.png).", rich_help_panel=TRUST
    ),
]
TensorboardOption = Annotated[
    Optional[str],
    typer.Option(help="Also log pictures, scalars and histograms to this TensorBoard log folder.", rich_help_panel=OUTPUT),
]
WorkersOption = Annotated[int, typer.Option(help="Rendering processes (0: one per CPU).", rich_help_panel=RUN)]
FaithfulnessOption = Annotated[
    bool,
    typer.Option(
        "--faithfulness",
        help="Measure each CAM: deletion and insertion curves (torch-cam's), ROAD (pytorch-grad-cam's); <layer>.faithfulness.png, run.json ranks the maps. Classifiers only; ~60 forward passes per image and layer.",
        rich_help_panel=TRUST,
    ),
]
SanityOption = Annotated[
    bool,
    typer.Option(
        "--sanity",
        help="Randomisation check of each CAM (Adebayo et al. 2018): re-explain with the layers randomised from the output down; <layer>.sanity.png. One pass per parametrised layer per image and layer.",
        rich_help_panel=TRUST,
    ),
]
JsonOutputOption = Annotated[bool, typer.Option("--json", help="Print run.json to stdout (for jq).", rich_help_panel=OUTPUT)]
QuietOption = Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing but errors.", rich_help_panel=OUTPUT)]
VerboseOption = Annotated[
    bool,
    typer.Option(
        "--verbose", help=f"A line per image however many there are (else only up to {FEW_IMAGES}).", rich_help_panel=OUTPUT
    ),
]


def cam_help() -> str:
    """``--cam``'s help, read from the method registry. The commands' annotations are strings that
    typer evaluates each time it builds the command, so a method registered after this module
    was imported is listed too."""
    from hookviz.methods import METHODS

    names = METHODS.names()
    return (
        f"CAM method: {', '.join(names)} or {' or '.join(METHODS.extra_choices)}. Several, separated by "
        "commas (gradcam,eigencam), in one run; the first that maps the layer is drawn in <layer>.cam.png."
    )


def cam_completions(incomplete: str) -> list[str]:
    from hookviz.methods import METHODS

    done, _, last = incomplete.rpartition(",")
    given = done.split(",") if done else []
    choices = METHODS.names() if given else [*METHODS.names(), *METHODS.extra_choices]
    return [",".join([*given, name]) for name in choices if name.startswith(last) and name not in given]


def task_help() -> str:
    from hookviz.tasks import task_names

    return f"{', '.join(task_names())}; auto: the model's source says, or for a factory's model, its output."


def pictures_help() -> str:
    from hookviz.render.kinds import groups_help

    return f"Pictures to write, comma-separated, or none: {groups_help()}."


def default_pictures() -> str:
    from hookviz.render.kinds import default_groups

    return ",".join(default_groups())


@dataclass(frozen=True)
class RunArgs:
    """``hookviz run``'s own options, as typed (``run_command`` makes the command's parameters of
    these fields, then of the settings the methods and tasks declare: ``declared_parameters``).
    ``--task``, ``--cam`` and ``--pictures`` read their help from the registries each time."""

    images: ImagesArgument = None
    model: ModelOption = "resnet50"
    weights: WeightsOption = "DEFAULT"
    seed: SeedOption = 0
    task: Annotated[str, typer.Option(help=task_help(), rich_help_panel=MODEL)] = "auto"
    trust_checkpoint: TrustCheckpointOption = False
    prompt: PromptOption = None
    prompts: PromptsFileOption = None
    layer: LayerOption = None
    layer_type: LayerTypeOption = None
    layout: LayoutOption = "auto"
    target: TargetOption = "top1"
    objective: ObjectiveOption = "logit"
    topk: TopkOption = 1
    output_key: OutputKeyOption = None
    cam: Annotated[str, typer.Option(help=cam_help(), autocompletion=cam_completions, rich_help_panel=METHODS)] = "gradcam"
    faithfulness: FaithfulnessOption = False
    sanity: SanityOption = False
    fail_on: FailOnOption = None
    dead_fraction: DeadFractionOption = 1.0
    baseline: BaselineOption = None
    rtol: RtolOption = _TOLERANCES.rtol
    atol: AtolOption = _TOLERANCES.atol
    min_cam_corr: MinCamCorrOption = _TOLERANCES.min_cam_corr
    pictures: Annotated[str, typer.Option(help=pictures_help(), rich_help_panel=PICTURES)] = field(
        default_factory=default_pictures
    )
    channels: ChannelsOption = "64"
    scale: ScaleOption = "tile"
    grad_channels: GradChannelsOption = False
    from_list: FromListOption = None
    resize: ResizeOption = None
    crop: CropOption = None
    no_crop: NoCropOption = False
    mean: MeanOption = None
    std: StdOption = None
    max_pixels: MaxPixelsOption = DEFAULT_MAX_PIXELS
    device: DeviceOption = "auto"
    batch_size: BatchSizeOption = 8
    workers: WorkersOption = 0
    skip_existing: SkipExistingOption = False
    shard: ShardOption = None
    out: OutOption = "hookviz-out"
    save_tensors: SaveTensorsOption = False
    tensorboard: TensorboardOption = None
    json_output: JsonOutputOption = False
    quiet: QuietOption = False
    verbose: VerboseOption = False
    debug: DebugOption = False


def declared_parameters(taken: set[str]) -> list[inspect.Parameter]:
    """A command's parameters for the settings each method and task declares
    (``hookviz.options.declared``), once per setting, in the panel of the first owner's kind.

    Raises:
        UsageError: a setting whose name or flag a command option has already (``taken``).
    """
    from hookviz.errors import UsageError
    from hookviz.options.declared import owners, settings_of

    parameters: dict[str, inspect.Parameter] = {}
    for owner in owners():
        for setting in settings_of(owner.group):
            if setting.keyword in parameters:
                continue
            if setting.keyword in taken:
                raise UsageError(f"{owner.words}: its setting {setting.flag} is an option of the command already; rename it")
            kind: Any = setting.kind if setting.default is not None else Optional[str]
            kind = Optional[list[str]] if setting.kind is tuple else kind
            flag = f"{setting.flag}/--no-{setting.flag[2:]}" if setting.kind is bool and setting.default else setting.flag
            declared = typer.Option(flag, help=setting.help, rich_help_panel=setting.panel or owner.panel)
            default = None if setting.kind is tuple else setting.default
            parameters[setting.keyword] = inspect.Parameter(
                setting.keyword, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=Annotated[kind, declared]
            )
    return list(parameters.values())


class TypedCommand:
    """A command function made of a typed dataclass of its own options (``args``) and the settings
    the registered methods and tasks declare, read afresh each time typer builds the command (so
    a plug-in's settings are flags once it is imported). Called, it hands ``body`` the ``args``
    instance and the declared settings given (keyword -> value, those left at their defaults too)."""

    def __init__(self, args: type, body: Callable[[Any, dict], None]):
        self.args, self.body = args, body
        self.__name__ = self.__qualname__ = body.__name__.lstrip("_")
        self.__doc__, self.__module__ = body.__doc__, body.__module__

    @property
    def __signature__(self) -> inspect.Signature:
        hints = typing.get_type_hints(self.args, include_extras=True)
        own = [
            inspect.Parameter(
                f.name,
                inspect.Parameter.KEYWORD_ONLY,
                default=f.default_factory() if f.default is MISSING else f.default,  # type: ignore[misc,operator]
                annotation=hints[f.name],
            )
            for f in fields(self.args)
        ]
        return inspect.Signature([*own, *declared_parameters({p.name for p in own})])

    @property
    def __annotations__(self) -> dict:  # type: ignore[override]  # typer reads a callback's hints
        return {p.name: p.annotation for p in self.__signature__.parameters.values()}

    def __call__(self, **given: Any) -> None:
        own = {f.name: given.pop(f.name) for f in fields(self.args) if f.name in given}
        self.body(self.args(**own), {k: tuple(v) if isinstance(v, list) else v for k, v in given.items()})


def option_groups(o: RunArgs, declared: dict[str, Any]) -> dict:
    """``hookviz run``'s options (``o``) and the declared settings given (``declared``) as the
    groups ``Run`` takes, each checked by its own class."""
    from hookviz.options import (
        CheckOptions,
        InputOptions,
        LayerOptions,
        ModelOptions,
        PictureOptions,
        RunOptions,
        TargetOptions,
        TrustOptions,
        parse_triple,
    )
    from hookviz.options.declared import build
    from hookviz.runs.cluster import command_shard

    return dict(
        model=ModelOptions(o.model, o.weights, o.seed, o.device, o.task, o.trust_checkpoint, given_prompts(o.prompt, o.prompts)),
        layers=LayerOptions(tuple(o.layer or ()), tuple(o.layer_type or ()), o.layout),
        inputs=InputOptions(
            resize=o.resize,
            crop=o.crop,
            mean=parse_triple(o.mean, "mean") if o.mean else None,
            std=parse_triple(o.std, "std") if o.std else None,
            whole_image=o.no_crop,
            max_pixels=o.max_pixels,
        ),
        target=TargetOptions(o.target, o.objective, o.cam, o.topk, o.output_key, build(declared, "method")),
        task_options=build(declared, "task"),
        pictures=PictureOptions(o.pictures, o.channels, o.scale, o.grad_channels),  # type: ignore[arg-type]  # it parses the texts
        options=RunOptions(
            out=o.out,  # type: ignore[arg-type]  # RunOptions makes the folders Paths
            save_tensors=o.save_tensors,
            batch_size=o.batch_size,
            skip_existing=o.skip_existing,
            shard=command_shard(o.shard),  # type: ignore[arg-type]  # RunOptions parses "K/N" and "auto"
            workers=o.workers,
            tensorboard=o.tensorboard,  # type: ignore[arg-type]
            command=tuple(sys.argv),
        ),
        checks=CheckOptions(
            fail_on=o.fail_on or (),  # type: ignore[arg-type]  # CheckOptions parses "a,b"
            dead_fraction=o.dead_fraction,
            baseline=o.baseline,  # type: ignore[arg-type]  # CheckOptions makes it a Path
            tolerances=Tolerances(rtol=o.rtol, atol=o.atol, min_cam_corr=o.min_cam_corr),
        ),
        trust=TrustOptions(faithfulness=o.faithfulness, sanity=o.sanity),
    )


def given_prompts(given: list[str] | None, files: list[str] | None) -> tuple[str, ...]:
    """``--prompt`` texts, then those of each ``--prompts FILE``, files in the order given (a
    prompt in two of them is refused as any prompt given twice is, by ``ModelOptions``)."""
    import os

    from hookviz.errors import UsageError
    from hookviz.options.model import Prompt, prompt_lines

    files = list(files or ())
    twice = next((file for k, file in enumerate(files) if os.path.realpath(file) in map(os.path.realpath, files[:k])), None)
    if twice is not None:  # else each of its prompts would be "given twice"
        raise UsageError(f"--prompts {twice}: the same file given twice; give each file once")
    # where each prompt was first given, so that one given again names it (ModelOptions checks --prompt's own)
    seen: dict[str, str] = {text.strip(): f"--prompt {text.strip()!r}" for text in given or () if isinstance(text, str)}
    read: list[str] = []
    for file in files:
        for number, text in prompt_lines(file):
            if text in seen:
                raise UsageError(f"--prompts {file}: line {number} ({text[:40]!r}) repeats {seen[text]}; give each prompt once")
            seen[text] = f"line {number} of {file}"
            read.append(Prompt(text, f"--prompts {file}", number))  # a message about it names its file and line
    return tuple(given or ()) + tuple(read)
