"""``make_atlas``: an atlas from a request, in named steps: plan (load the model, find the
samples), collect (the streaming pass, resumable), and, once every part is in, render (the
receptive fields, the crops, atlas.json, atlas.npz, the pages). A shard renders when it
finds itself the last to finish; ``merge_atlas`` renders from the shards' states on demand.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from hookviz.atlas.agreement import comparable, first_difference, refuse_merge, refuse_shard
from hookviz.atlas.collect import collect
from hookviz.atlas.plan import AtlasPlan, plan_atlas
from hookviz.atlas.relevance import check_relevance
from hookviz.atlas.request import RENDERING, AtlasRequest
from hookviz.atlas.state import STATE_FOLDER, AtlasState, load_state, state_path
from hookviz.errors import OutputError, UsageError, arg, display_path
from hookviz.store.outfolder import FolderLock

__all__ = ["AtlasResult", "make_atlas", "merge_atlas"]

#: The mark of the shard that renders the atlas, while it does (two shards may end together).
_RENDERING = "rendering"


@dataclass(frozen=True)
class AtlasResult:
    """``out``: the folder; ``written``: whether atlas.json was written (a shard that is not the
    last leaves it to the others); ``samples``: the samples mapped (as atlas.json counts them),
    ``failed``: those that could not be read, both the atlas's when it was written (by the last
    shard: every shard's), else this part's; ``waiting``: the shards not finished yet."""

    out: Path
    written: bool
    samples: int
    failed: int
    waiting: tuple[int, ...] = ()


def make_atlas(request: AtlasRequest, on_batch=None) -> AtlasResult:
    """Collect ``request``'s atlas and write it (see the module's docstring).

    Raises:
        UsageError: a bad model, layer or source; ``--skip-existing`` over another atlas's state.
        OutputError: the folder cannot be written, or another atlas (or run) is writing there now.
    """
    from hookviz.inputs.discovery import OUTPUT_MARKER

    plan = _planned(request)  # a bad model, layer, source or class leaves no folder behind
    _prepare_folder(request.out)
    hold = FolderLock(request.out, request.shard)
    hold.acquire()  # as a run holds its --out: another atlas writing there now is refused before any file is written
    try:
        (request.out / OUTPUT_MARKER).touch()
        return _made(plan, request, on_batch)
    finally:
        hold.release()


def _made(plan: AtlasPlan, request: AtlasRequest, on_batch) -> AtlasResult:
    """``make_atlas``'s work, once it holds ``request.out``."""
    path = state_path(request.out, request.shard)
    state = _resumed(plan, path) if request.skip_existing else None
    if state is None:
        state = AtlasState(plan.recipe(), request.shard)
    recorded = state.rendering
    state.rendering = request.rendering()  # what --merge takes: this command line's, a resumed one's too
    if request.shard is not None:  # shards run otherwise in the folder: said now, not after the work (nor saved)
        _shard_states(request.out, request.shard, (path, state), but=request.shard[0])
    if state.rendering != recorded and state.finished:
        state.save(path)
    if not state.finished:
        collect(plan, state, lambda s: s.save(path), on_batch)
    if request.shard is None:
        render(plan, state)
        return AtlasResult(request.out, True, state.mapped, len(state.failed))
    states, waiting = _shard_states(request.out, request.shard, (path, state))
    if waiting or not _claim(request.out):
        return AtlasResult(request.out, False, state.mapped, len(state.failed), waiting)
    merged = _merged(states)
    try:
        render(plan, merged)
    finally:
        (request.out / STATE_FOLDER / _RENDERING).unlink(missing_ok=True)
    return AtlasResult(request.out, True, merged.mapped, len(merged.failed))  # the atlas's, as --merge says them


def merge_atlas(out: Path, device: str = "cpu", batch_size: int = 32, say=None, **given) -> AtlasResult:
    """Write the atlas of the shards' states in ``out`` (``hookviz atlas --merge DIR``), named and
    visualised as the shards were run (the options of ``RENDERING`` each state records), so that it
    is the atlas the last shard writes. ``given``: those options given for the merge: one the
    shards set must be what they set; one they left off (no ``label_with``, ``visualize`` 0) may be
    given, to add names or pictures; one the shards disagree on must be given. ``say``: as
    ``AtlasRequest.say``.

    Raises:
        UsageError: no states there, states of different requests, shards not finished, an option
            given that contradicts the shards', or one they disagree on not given.
    """
    folder = out / STATE_FOLDER
    found = sorted(folder.glob("state-*-of-*.npz")) if folder.is_dir() else []
    if not found:
        raise UsageError(
            f"{arg('merge', display_path(out))}: holds no shard's state; run hookviz atlas --shard K/N --out there first"
        )
    first = load_state(found[0])
    count = first.shard[1] if first.shard else 1
    states, waiting = _merge_states(out, count)
    if waiting:
        raise UsageError(
            f"{arg('merge', display_path(out))}: shard{'s' if len(waiting) > 1 else ''} "
            f"{', '.join(map(str, waiting))} of {count} not finished; run {'them' if len(waiting) > 1 else 'it'} "
            "(with --skip-existing to resume), then merge"
        )
    recipe = first.recipe
    request = AtlasRequest(
        model=recipe["model"],
        layers=tuple(recipe["layers"]),
        sources=tuple(recipe["sources"]),
        out=out,
        weights=recipe["weights"],
        seed=recipe["seed"],
        top=recipe["top"],
        rank=recipe["rank"],
        device=device,
        batch_size=batch_size,
        relevance=recipe.get("relevance"),
        relevance_rule=recipe.get("relevance_rule", "gradient-x-activation"),
        sample_options=_sample_options(recipe),
        say=say,
        **_merge_rendering(out, states, given),
    )
    plan = _planned(request)
    if plan.recipe()["samples"] != recipe["samples"]:
        raise UsageError(
            f"{arg('merge', display_path(out))}: the sources no longer hold the samples the shards took; run them again"
        )
    merged = _merged(states)
    render(plan, merged)
    return AtlasResult(out, True, merged.mapped, len(merged.failed))


def _merge_rendering(out: Path, states: list[AtlasState], given: dict) -> dict:
    """The naming and visualising options of a merge: the shards' (``merge_atlas`` says when ``given`` ones count).

    Raises:
        UsageError: a given option contradicts the shards', or the shards disagree on one not given.
    """
    shards = [(state.shard[0] if state.shard else 1, state.rendering) for state in states]
    recorded = [(number, record) for number, record in shards if record is not None]
    if len(recorded) < len(shards):  # states of an older hookviz: what the merge is given
        return given
    chosen = dict(given)
    for group in RENDERING:
        if not any(record[group[0]] for _, record in recorded):
            continue  # the shards left it off: the merge may add it
        for name in group:
            on = [(number, record[name]) for number, record in recorded if name == group[0] or record[group[0]]]
            values = dict.fromkeys(comparable(name, value) for _, value in on)
            if len(values) > 1 and name not in given:
                count = states[0].shard[1] if states[0].shard else 1
                listed = ", ".join(f"{state_path(out, (number, count)).name}: {value}" for number, value in on)
                raise UsageError(
                    f"{arg('merge', display_path(out))}: the shards were run with different {arg(name)} ({listed}); "
                    f"give {arg(name)} to choose, or run those that differ again with the others' options"
                )
            if len(values) == 1 and name in given and comparable(name, given[name]) not in values:
                raise UsageError(
                    f"{arg(name, given[name])}: the shards were run with {arg(name, on[0][1])}, and --merge writes "
                    f"the atlas they make; drop {arg(name)}, or run the shards again with it"
                )
            chosen.setdefault(name, on[0][1])
            if not chosen[group[0]]:
                break  # the merge turns the group off: its other options do not count
    if chosen.get("vocabulary") is not None:
        chosen["vocabulary"] = Path(chosen["vocabulary"])
    return chosen


def _planned(request: AtlasRequest) -> AtlasPlan:
    """The request's plan, its ``--relevance`` checked (a class the model lacks, a model LRP does not cover)."""
    plan = plan_atlas(request, request.notes)
    check_relevance(plan)
    return plan


def _prepare_folder(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise OutputError(f"{arg('out', display_path(out))}: is a file; give a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{arg('out', display_path(out))}: cannot create it ({exc.strerror})") from None
    if not os.access(out, os.W_OK):
        raise OutputError(f"{arg('out', display_path(out))}: cannot write there; choose another folder")
    run = next((p.name for p in (out / "run.json", *sorted(out.glob("run-*-of-*.json"))) if p.is_file()), None)
    if run is not None:  # each writes its own index.html
        raise OutputError(
            f"{arg('out', display_path(out))}: holds a hookviz run's results ({run}), whose gallery the atlas's "
            f"index.html would replace; choose another {arg('out')}"
        )


def _resumed(plan: AtlasPlan, path: Path) -> AtlasState | None:
    if not path.exists():
        return None
    try:
        state = load_state(path)
    except (OSError, ValueError, KeyError) as exc:
        raise UsageError(f"{display_path(path)}: not an atlas state ({exc}); delete it, or drop {arg('skip_existing')}") from None
    if state.recipe != plan.recipe():
        raise UsageError(
            f"{arg('out', display_path(plan.request.out))} holds an atlas of other arguments or samples; "
            f"drop {arg('skip_existing')} to start over, or choose another folder"
        )
    return state


def _shard_states(
    out: Path, shard: tuple[int, int], mine: tuple[Path, AtlasState], but: int = 0
) -> tuple[list[AtlasState], tuple[int, ...]]:
    """The finished shards' states in ``out`` and the numbers of those not finished (shard ``but``
    left out); ``mine``: this shard's state file and state, which every other must agree with.

    Raises:
        UsageError: a state there was run with other options (``hookviz.atlas.agreement``).
    """
    states, waiting = [], []
    for k in range(1, shard[1] + 1):
        path = state_path(out, (k, shard[1]))
        if k == but:
            continue
        state = load_state(path) if path.exists() else None
        differing = None if state is None else first_difference([mine[1], state], rendering=True)
        if differing is not None:
            raise refuse_shard(differing, mine, (path, state))  # type: ignore[arg-type]
        if state is None or not state.finished:
            waiting.append(k)
        else:
            states.append(state)
    return states, tuple(waiting)


def _merge_states(out: Path, count: int) -> tuple[list[AtlasState], tuple[int, ...]]:
    """The finished states of ``count`` shards in ``out``, and the numbers of those not finished.

    Raises:
        UsageError: shards run with options that make other atlases (``hookviz.atlas.agreement``).
    """
    paths = [state_path(out, (k, count)) for k in range(1, count + 1)]
    present = [(path, load_state(path)) for path in paths if path.exists()]
    differing = first_difference([state for _, state in present])
    if differing is not None:
        raise refuse_merge(out, differing, present)
    finished = {path: state for path, state in present if state.finished}
    return list(finished.values()), tuple(k for k, path in enumerate(paths, 1) if path not in finished)


def _sample_options(recipe: dict) -> tuple:
    """The sample kinds' options a recipe records (``AtlasRequest.recipe``): a clip's ``--frames``..."""
    from dataclasses import fields

    from hookviz.samples import VideoOptions

    known = {item.name for item in fields(AtlasRequest)} | {"samples"}  # the rest: AtlasRequest._sample_settings
    given = {name: value for name, value in recipe.items() if name not in known}
    return (VideoOptions(**given),) if given else ()


def _claim(out: Path) -> bool:
    """Whether this process is the one to render (the first to claim it, when shards end together)."""
    try:
        os.close(os.open(out / STATE_FOLDER / _RENDERING, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def _merged(states: list[AtlasState]) -> AtlasState:
    merged = AtlasState(states[0].recipe, None)
    for state in states:
        merged.merge(state)
    merged.finished = True
    return merged


def render(plan: AtlasPlan, state: AtlasState) -> None:
    """The receptive fields, the crops, atlas.json, atlas.npz and the pages of a finished state."""
    from hookviz.atlas.concepts import add_concepts
    from hookviz.atlas.crops import cut_examples
    from hookviz.atlas.fields import receptive_field
    from hookviz.atlas.pages import write_pages
    from hookviz.atlas.records import AtlasWriter
    from hookviz.store.files import write_json
    from hookviz.store.folders import layer_stems

    out = plan.request.out
    blank = tuple(
        t.to(plan.request.device) if hasattr(t, "to") else t for t in plan.kind.blank(plan.model.preprocessing, plan.settings)
    )
    fields = {name: receptive_field(plan.model.module, _spec(plan, name), blank) for name in state.layers}
    stems = layer_stems(list(state.layers))
    writer = AtlasWriter(out, plan, state, fields, stems)
    cut_examples(plan, state, fields, writer.take)
    document = add_concepts(plan, writer.document(), out)
    writer.write_maps()
    write_pages(out, document, state, stems)
    write_json(out / "atlas.json", document)


def _spec(plan: AtlasPlan, name: str):
    path, _, call = name.partition(":")
    for spec in plan.specs:
        if spec.path == path:
            return spec if not call or spec.call is not None else _with_call(spec, int(call))
    raise UsageError(f"{arg('layers', name)}: not among the layers asked")


def _with_call(spec, call: int):
    from dataclasses import replace

    return replace(spec, call=call)
