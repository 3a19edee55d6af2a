"""The ``hookviz`` command's options: the declarations several commands share (typer
``Annotated`` types), ``--cam``'s help and completions (read from the method registry), and
``hookviz run``'s parsed values turned into the option groups the library takes."""

from __future__ import annotations

import sys
from types import SimpleNamespace
from typing import Annotated, Any, Optional

import typer
from typer.core import TyperCommand

from hookviz.options import MAX_SIDE, MAX_STEPS, MAX_TOPK
from hookviz.progress import FEW_IMAGES

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
    "ScoreThresholdOption",
    "MaxDetectionsOption",
    "TargetImageOption",
    "BoxObjectiveOption",
    "StepsOption",
    "IgBaselineOption",
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
ScoreThresholdOption = Annotated[
    float, typer.Option(help="Detection: explain detections with at least this score.", rich_help_panel=TARGET)
]
MaxDetectionsOption = Annotated[
    int, typer.Option(help="Detection: explain at most this many detections per image, best first.", rich_help_panel=TARGET)
]
TargetImageOption = Annotated[
    Optional[list[str]],
    typer.Option(
        "--target-image",
        help="Embedding models: explain the cosine similarity to this reference photo (a folder: its photos' mean embedding); repeat for one CAM each.",
        rich_help_panel=TARGET,
    ),
]
BoxObjectiveOption = Annotated[
    str,
    typer.Option(
        help="Detection: score (the matched box's score alone) or score+iou (plus the box's IoU with the detection, as pytorch-grad-cam's FasterRCNNBoxScoreTarget).",
        rich_help_panel=TARGET,
    ),
]
StepsOption = Annotated[
    int,
    typer.Option(
        help=f"Integrated gradients: steps of the integral (Gauss-Legendre, as captum's; 1 to {MAX_STEPS}).",
        rich_help_panel=METHODS,
    ),
]
IgBaselineOption = Annotated[
    str,
    typer.Option(
        "--ig-baseline",
        help="Integrated gradients: integrate from zero (zeros in the model's input space, as captum's), blur (the input blurred) or mean (its mean colour).",
        rich_help_panel=METHODS,
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


def option_groups(o: SimpleNamespace) -> dict:
    """``hookviz run``'s options as the groups ``Run`` takes, each checked by its own class."""
    from hookviz.options import (
        CheckOptions,
        InputOptions,
        LayerOptions,
        ModelOptions,
        PictureOptions,
        RunOptions,
        TargetOptions,
        Tolerances,
        TrustOptions,
        parse_triple,
    )
    from hookviz.runs.cluster import command_shard
    from hookviz.tasks import DetectOptions, EmbedOptions

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
        target=TargetOptions(
            target=o.target,
            objective=o.objective,
            cam=o.cam,
            topk=o.topk,
            output_key=o.output_key,
            steps=o.steps,
            ig_baseline=o.ig_baseline,
        ),
        task_options=(
            DetectOptions(score_threshold=o.score_threshold, max_detections=o.max_detections, box_objective=o.box_objective),
            EmbedOptions(target_images=tuple(o.target_image or ())),
        ),
        pictures=PictureOptions(pictures=o.pictures, channels=o.channels, scale=o.scale, grad_channels=o.grad_channels),
        options=RunOptions(
            out=o.out,
            save_tensors=o.save_tensors,
            batch_size=o.batch_size,
            skip_existing=o.skip_existing,
            shard=command_shard(o.shard),  # type: ignore[arg-type]  # RunOptions parses "K/N" and "auto"
            workers=o.workers,
            tensorboard=o.tensorboard,
            command=tuple(sys.argv),
        ),
        checks=CheckOptions(
            fail_on=o.fail_on or (),
            dead_fraction=o.dead_fraction,
            baseline=o.baseline,
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
