"""The ``hookviz`` command's options: the declarations several commands share (typer
``Annotated`` types), the help panels, and ``--cam``'s, ``--task``'s and ``--pictures``' help
and completions (read from the registries). ``hookviz.run_arguments`` groups ``hookviz run``'s."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from typer.core import TyperCommand, TyperGroup

from hookviz.command_values import plain_values
from hookviz.options import MAX_SIDE, MAX_TOPK, Tolerances
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
    "AnswerOption",
    "MaxNewTokensOption",
    "TokensOption",
    "WordsOption",
    "DtypeOption",
    "TopkOption",
    "OutputKeyOption",
    "TrustCheckpointOption",
    "ChannelsOption",
    "ScaleOption",
    "GradChannelsOption",
    "TopChannelsOption",
    "AtlasOption",
    "RelevanceRuleOption",
    "PixelClipOption",
    "PixelSignOption",
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
    "LabelsOption",
    "WorkersOption",
    "FaithfulnessOption",
    "SanityOption",
    "JsonOutputOption",
    "QuietOption",
    "VerboseOption",
    "AtlasOption",
    "AtlasData",
    "AtlasWeights",
    "AtlasLayers",
    "AtlasRank",
    "AtlasFromList",
    "AtlasShard",
    "AtlasResume",
    "AtlasMerge",
    "AtlasRelevance",
    "AtlasRule",
    "AtlasLabel",
    "AtlasVocabulary",
    "AtlasLabelWeights",
    "AtlasVisualize",
    "AtlasSteps",
    "AtlasSeconds",
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


class PlainGroup(TyperGroup):
    """The ``hookviz`` group, whose own options' plain values are taken without typer's pydantic
    adapters, as its commands' are (``command_values``)."""

    def get_params(self, ctx: Any) -> list:
        return plain_values(super().get_params(ctx))  # its --help and completion options too


class PanelledCommand(TyperCommand):
    """A command whose plain-text ``--help`` (NO_COLOR, a dumb terminal: ``process.plain_text_only``)
    lists its options under their panels' titles too, as rich's boxes do; its parameters'
    plain values are taken without typer's pydantic adapters (``command_values``)."""

    def get_params(self, ctx: Any) -> list:
        return plain_values(super().get_params(ctx))  # its --help and completion options too

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
        "--prompt",
        help="CLIP models (open_clip:ARCH): a text prompt, one class each; repeatable. A vision-language model "
        "(hf:FOLDER of a LLaVA): the question about the photo, whose answer is explained token by token.",
        rich_help_panel=MODEL,
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
    str,
    typer.Option(
        help="logit: back-propagate the target's logit; ce: cross-entropy; logprob: a vision-language model's token's "
        "log-probability.",
        rich_help_panel=TARGET,
    ),
]
AnswerOption = Annotated[
    Optional[str],
    typer.Option(help="Vision-language model: explain this answer (teacher forcing) instead of its own.", rich_help_panel=TARGET),
]
MaxNewTokensOption = Annotated[
    int,
    typer.Option(help="Vision-language model: at most this many tokens of its answer, written greedily.", rich_help_panel=TARGET),
]
TokensOption = Annotated[
    Optional[str],
    typer.Option(
        help="Vision-language model: explain these answer tokens (indices from 0: 3,5); default every one.",
        rich_help_panel=TARGET,
    ),
]
WordsOption = Annotated[
    Optional[str],
    typer.Option(
        help="Vision-language model: explain these words of the answer (cat,black), a word's tokens summed.",
        rich_help_panel=TARGET,
    ),
]
DtypeOption = Annotated[str, typer.Option(help="Vision-language model: compute in float32 or bfloat16.", rich_help_panel=MODEL)]
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
TopChannelsOption = Annotated[
    int,
    typer.Option(
        "--top-channels",
        help="Per layer, a picture of the N channels that gave most to the target: each one's share of the score, its map "
        "here and (with --atlas) its best examples elsewhere; report.json lists them.",
        rich_help_panel=PICTURES,
    ),
]
AtlasOption = Annotated[
    Optional[Path],
    typer.Option(
        "--atlas", help="The atlas folder (hookviz atlas --out) whose examples --top-channels shows.", rich_help_panel=PICTURES
    ),
]
RelevanceRuleOption = Annotated[
    str,
    typer.Option(
        "--relevance-rule",
        help="How a channel's contribution to the score is computed: gradient-x-activation, or lrp (zennit).",
        rich_help_panel=PICTURES,
    ),
]
GradChannelsOption = Annotated[
    bool, typer.Option("--grad-channels", help="Also draw the grid of grad_output channels.", rich_help_panel=PICTURES)
]
PixelClipOption = Annotated[
    float,
    typer.Option(
        help="Maps of the input (pixel_maps.png): clip the largest values holding this per cent of the map's total "
        "(captum's outlier_perc; 0 to under 100).",
        rich_help_panel=PICTURES,
    ),
]
PixelSignOption = Annotated[
    str,
    typer.Option(
        help="Maps of the input (pixel_maps.png): draw absolute (|value|, captum's default), positive or all values.",
        rich_help_panel=PICTURES,
    ),
]
SaveTensorsOption = Annotated[
    bool, typer.Option("--save-tensors", help="Write tensors.npz with every recorded array.", rich_help_panel=OUTPUT)
]
LabelsOption = Annotated[
    Optional[str],
    typer.Option(
        help="A CSV of true classes, one row per image: its path, file name or folder name, then its class "
        "(index.html and samples.csv filter on them; images in class folders, ImageFolder style, need none).",
        rich_help_panel=OUTPUT,
    ),
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


# ----------------------------------------------------------------------------- hookviz atlas

AtlasData = Annotated[
    Optional[list[str]],
    typer.Argument(help="Photos, clips, folders or patterns (ImageFolder layout: true classes).", show_default=False),
]
AtlasWeights = Annotated[
    str, typer.Option("--weights", help="DEFAULT, none (random, seeded), a weights name or a state_dict file.")
]
AtlasLayers = Annotated[Optional[list[str]], typer.Option("--layer", help="A layer to map (repeat for more).")]
AtlasRank = Annotated[str, typer.Option("--rank", help="Rank a channel's examples by the max or the mean of its map.")]
AtlasFromList = Annotated[Optional[str], typer.Option("--from-list", help="Read more sources from FILE, one a line (- : stdin).")]
AtlasShard = Annotated[
    Optional[str],
    typer.Option("--shard", help="Take the K-th of N slices of the samples (K/N), or auto (torchrun, Slurm array)."),
]
AtlasResume = Annotated[bool, typer.Option("--skip-existing", help="Resume from the state a killed run left in --out.")]
AtlasMerge = Annotated[
    Optional[Path],
    typer.Option(
        "--merge",
        help="Write the atlas of the finished shards in DIR, named and visualised as the shards were run, and nothing else.",
    ),
]
AtlasRelevance = Annotated[
    Optional[str],
    typer.Option(
        "--relevance",
        help="Also rank each channel's examples by its contribution to CLASS's score (a name, an index, or predicted).",
    ),
]
AtlasRule = Annotated[
    str, typer.Option("--relevance-rule", help="--relevance's contribution: gradient-x-activation or lrp (zennit).")
]
AtlasLabel = Annotated[
    Optional[str],
    typer.Option("--label-with", help="Name each channel by CLIP-Dissect with open_clip:ARCH or open_clip:ARCH/TAG."),
]
AtlasVocabulary = Annotated[
    Optional[Path], typer.Option("--vocabulary", help="--label-with's concepts: a text file, one a line.")
]
AtlasLabelWeights = Annotated[
    str, typer.Option("--label-weights", help="--label-with's weights: DEFAULT (cached), none (random) or a file.")
]
AtlasVisualize = Annotated[
    int,
    typer.Option("--visualize", help="Optimise an input to excite each of the N channels per layer with the best top example."),
]
AtlasSteps = Annotated[int, typer.Option("--visualize-steps", help="--visualize: optimiser steps per channel, at most.")]
AtlasSeconds = Annotated[Optional[float], typer.Option("--visualize-seconds", help="--visualize: seconds per channel, at most.")]
