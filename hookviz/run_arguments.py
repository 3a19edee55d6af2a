"""``hookviz run``'s arguments: its options as typed groups, one per help panel (``RunArgs``),
the command made of them and of the settings methods and tasks declare (``TypedCommand``), and
the values given turned into the option groups the library takes (``option_groups``)."""

from __future__ import annotations

import functools
import inspect
import sys
import typing
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from typing import Annotated, Any, Optional

import typer

from hookviz.command_options import (
    _TOLERANCES,
    METHODS,
    MODEL,
    PICTURES,
    AnswerOption,
    AtlasOption,
    AtolOption,
    BaselineOption,
    BatchSizeOption,
    ChannelsOption,
    CropOption,
    DeadFractionOption,
    DebugOption,
    DeviceOption,
    DtypeOption,
    FailOnOption,
    FaithfulnessOption,
    FromListOption,
    GradChannelsOption,
    ImagesArgument,
    JsonOutputOption,
    LabelsOption,
    LayerOption,
    LayerTypeOption,
    LayoutOption,
    MaxNewTokensOption,
    MaxPixelsOption,
    MeanOption,
    MinCamCorrOption,
    ModelOption,
    NoCropOption,
    ObjectiveOption,
    OutOption,
    OutputKeyOption,
    PixelClipOption,
    PixelSignOption,
    PromptOption,
    PromptsFileOption,
    QuietOption,
    RelevanceRuleOption,
    ResizeOption,
    RtolOption,
    SanityOption,
    SaveTensorsOption,
    ScaleOption,
    SeedOption,
    ShardOption,
    SkipExistingOption,
    StdOption,
    TargetOption,
    TensorboardOption,
    TokensOption,
    TopChannelsOption,
    TopkOption,
    TrustCheckpointOption,
    VerboseOption,
    WeightsOption,
    WordsOption,
    WorkersOption,
    cam_completions,
    cam_help,
    default_pictures,
    pictures_help,
    task_help,
)
from hookviz.options import DEFAULT_MAX_PIXELS, Tolerances

__all__ = ["RunArgs", "TypedCommand", "declared_parameters", "given_options", "given_prompts", "option_groups"]


@dataclass(frozen=True)
class ModelArgs:
    """The photos and the model (the ``Model`` panel)."""

    images: ImagesArgument = None
    model: ModelOption = "resnet50"
    weights: WeightsOption = "DEFAULT"
    seed: SeedOption = 0
    task: Annotated[str, typer.Option(help=task_help(), rich_help_panel=MODEL)] = "auto"
    trust_checkpoint: TrustCheckpointOption = False
    prompt: PromptOption = None
    prompts: PromptsFileOption = None


@dataclass(frozen=True)
class LayerArgs:
    """Which layers are recorded (the ``Layers`` panel)."""

    layer: LayerOption = None
    layer_type: LayerTypeOption = None
    layout: LayoutOption = "auto"


@dataclass(frozen=True)
class TargetArgs:
    """What is explained, and by which methods (the ``Target`` and ``Methods`` panels)."""

    target: TargetOption = "top1"
    objective: ObjectiveOption = "logit"
    topk: TopkOption = 1
    output_key: OutputKeyOption = None
    cam: Annotated[str, typer.Option(help=cam_help(), autocompletion=cam_completions, rich_help_panel=METHODS)] = "gradcam"


@dataclass(frozen=True)
class VlmArgs:
    """What a vision-language model is asked beside ``--prompt`` (the ``Target`` and ``Model`` panels)."""

    answer: AnswerOption = None
    max_new_tokens: MaxNewTokensOption = 16
    tokens: TokensOption = None
    words: WordsOption = None
    dtype: DtypeOption = "float32"


@dataclass(frozen=True)
class TrustArgs:
    """How far to trust the maps, and the checks against a baseline (the ``Trust and checks`` panel)."""

    faithfulness: FaithfulnessOption = False
    sanity: SanityOption = False
    fail_on: FailOnOption = None
    dead_fraction: DeadFractionOption = 1.0
    baseline: BaselineOption = None
    rtol: RtolOption = _TOLERANCES.rtol
    atol: AtolOption = _TOLERANCES.atol
    min_cam_corr: MinCamCorrOption = _TOLERANCES.min_cam_corr


@dataclass(frozen=True)
class PictureArgs:
    """Which pictures, and how (the ``Pictures`` panel)."""

    pictures: Annotated[str, typer.Option(help=pictures_help(), rich_help_panel=PICTURES)] = field(
        default_factory=default_pictures
    )
    channels: ChannelsOption = "64"
    scale: ScaleOption = "tile"
    grad_channels: GradChannelsOption = False
    pixel_clip: PixelClipOption = 2.0
    pixel_sign: PixelSignOption = "absolute"
    top_channels: TopChannelsOption = 0
    atlas: AtlasOption = None
    relevance_rule: RelevanceRuleOption = "gradient-x-activation"


@dataclass(frozen=True)
class ImageArgs:
    """Where the photos come from and how they are prepared (the ``Images`` panel)."""

    from_list: FromListOption = None
    resize: ResizeOption = None
    crop: CropOption = None
    no_crop: NoCropOption = False
    mean: MeanOption = None
    std: StdOption = None
    max_pixels: MaxPixelsOption = DEFAULT_MAX_PIXELS


@dataclass(frozen=True)
class RunPanelArgs:
    """How the run goes: device, batches, workers, resuming, shards (the ``Run`` panel)."""

    device: DeviceOption = "auto"
    batch_size: BatchSizeOption = 8
    workers: WorkersOption = 0
    skip_existing: SkipExistingOption = False
    shard: ShardOption = None


@dataclass(frozen=True)
class OutputArgs:
    """What is written and printed (the ``Output`` panel)."""

    out: OutOption = "hookviz-out"
    save_tensors: SaveTensorsOption = False
    tensorboard: TensorboardOption = None
    labels: LabelsOption = None
    json_output: JsonOutputOption = False
    quiet: QuietOption = False
    verbose: VerboseOption = False
    debug: DebugOption = False


@dataclass(frozen=True)
class RunArgs:
    """``hookviz run``'s own options, as typed, one group per help panel (``TypedCommand`` makes
    the command's parameters of their fields, in this order, then of the settings the methods and
    tasks declare: ``declared_parameters``). ``--task``, ``--cam`` and ``--pictures`` read their
    help from the registries each time."""

    model: ModelArgs
    layers: LayerArgs
    target: TargetArgs
    vlm: VlmArgs
    trust: TrustArgs
    pictures: PictureArgs
    images: ImageArgs
    run: RunPanelArgs
    output: OutputArgs


def declared_parameters(command_parameters: list[inspect.Parameter]) -> list[inspect.Parameter]:
    """A command's parameters for the settings each method and task declares
    (``hookviz.options.declared``), once per setting, in the panel of the first owner's kind.

    Raises:
        UsageError: a setting whose name or flag one of the ``command_parameters`` has
            already, or whose flag another setting has (one flag would mean two things).
    """
    from hookviz.errors import UsageError
    from hookviz.options.declared import owners, settings_of

    parameters: dict[str, inspect.Parameter] = {}
    flags = {flag: "an option of the command" for parameter in command_parameters for flag in _flags(parameter)}
    for owner in owners():
        for setting in settings_of(owner.group):
            if setting.keyword in parameters:
                continue
            taken = (
                "an option of the command" if setting.keyword in {p.name for p in command_parameters} else flags.get(setting.flag)
            )
            if taken:
                where = f"{owner.words} ({owner.group.__module__}.{owner.group.__qualname__})"
                raise UsageError(f"{where}: its setting {setting.flag} is {taken} already; rename it")
            kind: Any = setting.kind if setting.default is not None and not setting.words else Optional[str]
            kind = Optional[list[str]] if setting.kind is tuple else kind
            flag = f"{setting.flag}/--no-{setting.flag[2:]}" if setting.kind is bool and setting.default else setting.flag
            declared = typer.Option(flag, help=setting.help, rich_help_panel=setting.panel or owner.panel)
            default = None if setting.kind is tuple else setting.default
            parameters[setting.keyword] = inspect.Parameter(
                setting.keyword, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=Annotated[kind, declared]
            )
            flags |= {name: f"a flag of {owner.words}" for name in _flags(parameters[setting.keyword])}
    return list(parameters.values())


def _flags(parameter: inspect.Parameter) -> set[str]:
    """The flags a typer parameter answers to (``--out``, ``-o``, ``--no-crop``): those its
    ``typer.Option`` names, else typer's own from its name."""
    infos = [meta for meta in getattr(parameter.annotation, "__metadata__", ()) if isinstance(meta, typer.models.ParameterInfo)]
    # In Annotated form typer keeps the first flag as the OptionInfo's default ("--out", "-o")
    first = [info.default for info in infos if isinstance(info.default, str) and info.default.startswith("-")]
    declared = [*first, *(d for info in infos for d in (info.param_decls or ()))]
    if infos and not isinstance(infos[0], typer.models.OptionInfo):
        return set()  # an argument: no flag
    from_name = "--" + parameter.name.replace("_", "-")
    names = declared or ([f"{from_name}/--no-{from_name[2:]}"] if _is_bool(parameter.annotation) else [from_name])
    return {flag.strip() for name in names for flag in name.split("/") if flag.strip().startswith("-")}


@functools.cache
def _hints(group: type, extras: bool = True) -> dict:
    """A dataclass's type hints, read once: typer asks for the signature several times, and each
    reading compiles every string annotation of the class again (once per field: ~30 ms of a
    run's start, before the render workers start, were it read each time)."""
    return typing.get_type_hints(group, include_extras=extras)


def _is_bool(annotation) -> bool:
    return typing.get_args(annotation)[:1] == (bool,) or annotation is bool


class TypedCommand:
    """A command function made of a typed dataclass of its own options (``args``: a dataclass of
    groups, each a dataclass of options) and the settings
    the registered methods and tasks declare, read afresh each time typer builds the command (so
    a plug-in's settings are flags once it is imported). Called, it hands ``body`` the ``args``
    instance and the declared settings given (keyword -> value, those left at their defaults too)."""

    def __init__(self, args: type, body: Callable[[Any, dict], None]):
        self.args, self.body = args, body
        self.__name__ = self.__qualname__ = body.__name__.lstrip("_")
        self.__doc__, self.__module__ = body.__doc__, body.__module__

    @property
    def __signature__(self) -> inspect.Signature:
        command_parameters = [
            inspect.Parameter(
                f.name,
                inspect.Parameter.KEYWORD_ONLY,
                default=f.default_factory() if f.default is MISSING else f.default,  # type: ignore[misc,operator]
                annotation=_hints(group)[f.name],
            )
            for group in self._groups()
            for f in fields(group)
        ]
        return inspect.Signature([*command_parameters, *declared_parameters(command_parameters)])

    def _groups(self) -> list[type]:
        hints = _hints(self.args, extras=False)
        return [hints[f.name] for f in fields(self.args)]

    @property
    def __annotations__(self) -> dict:  # type: ignore[override]  # typer reads a callback's hints
        return {p.name: p.annotation for p in self.__signature__.parameters.values()}

    def __call__(self, **given: Any) -> None:
        groups = {
            f.name: group(**{g.name: given.pop(g.name) for g in fields(group) if g.name in given})
            for f, group in zip(fields(self.args), self._groups())
        }
        self.body(self.args(**groups), {k: tuple(v) if isinstance(v, list) else v for k, v in given.items()})


def option_groups(o: RunArgs, declared: dict[str, Any]) -> dict:
    """``hookviz run``'s options (``o``) and the declared settings given (``declared``) as the
    groups ``Run`` takes, each checked by its own class."""
    from hookviz.options import (
        CheckOptions,
        InputOptions,
        LayerOptions,
        ModelOptions,
        RunOptions,
        TrustOptions,
        parse_triple,
    )
    from hookviz.options.declared import build
    from hookviz.runs.cluster import command_shard

    model, images, checks, run = o.model, o.images, o.trust, o.run
    return dict(
        model=ModelOptions(
            model.model,
            model.weights,
            model.seed,
            run.device,
            model.task,
            model.trust_checkpoint,
            given_prompts(model.prompt, model.prompts),
        ),
        layers=LayerOptions(tuple(o.layers.layer or ()), tuple(o.layers.layer_type or ()), o.layers.layout),
        inputs=InputOptions(
            resize=images.resize,
            crop=images.crop,
            mean=parse_triple(images.mean, "mean") if images.mean else None,
            std=parse_triple(images.std, "std") if images.std else None,
            whole_image=images.no_crop,
            max_pixels=images.max_pixels,
        ),
        target=_target(o.target, build(declared, "method")),
        task_options=build(declared, "task"),
        sample_options=build(declared, "sample kind"),
        pictures=_pictures(o.pictures),
        options=RunOptions(
            out=o.output.out,  # type: ignore[arg-type]  # RunOptions makes the folders Paths
            save_tensors=o.output.save_tensors,
            batch_size=run.batch_size,
            skip_existing=run.skip_existing,
            shard=command_shard(run.shard),  # type: ignore[arg-type]  # RunOptions parses "K/N" and "auto"
            workers=run.workers,
            tensorboard=o.output.tensorboard,  # type: ignore[arg-type]
            labels=o.output.labels,  # type: ignore[arg-type]  # RunOptions makes it a Path
            command=tuple(sys.argv),
        ),
        checks=CheckOptions(
            fail_on=checks.fail_on or (),  # type: ignore[arg-type]  # CheckOptions parses "a,b"
            dead_fraction=checks.dead_fraction,
            baseline=checks.baseline,  # type: ignore[arg-type]  # CheckOptions makes it a Path
            tolerances=Tolerances(rtol=checks.rtol, atol=checks.atol, min_cam_corr=checks.min_cam_corr),
        ),
        trust=TrustOptions(faithfulness=checks.faithfulness, sanity=checks.sanity),
    )


def given_options(o: RunArgs) -> dict[str, Any]:
    """``o``'s options given another value than their default, by field name (an option given
    several times, or none, as typer hands it: a list, ``None``)."""
    given = {}
    for group in fields(o):
        values = getattr(o, group.name)
        for f in fields(values):
            value, default = getattr(values, f.name), f.default_factory() if f.default is MISSING else f.default  # type: ignore[misc,operator]
            if value != default and not (default is None and isinstance(value, (list, tuple)) and not value):
                given[f.name] = value
    return given


def _target(t: TargetArgs, settings: tuple) -> Any:
    from hookviz.options import TargetOptions

    return TargetOptions(t.target, t.objective, t.cam, t.topk, t.output_key, settings)


def _pictures(p: PictureArgs) -> Any:
    from hookviz.options import PictureOptions

    return PictureOptions(
        p.pictures, p.channels, p.scale, p.grad_channels, p.pixel_clip, p.pixel_sign,  # type: ignore[arg-type]  # it parses the texts
        top_channels=p.top_channels, atlas=p.atlas, relevance_rule=p.relevance_rule,
    )  # fmt: skip


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
