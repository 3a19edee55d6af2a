"""``hookviz run`` of a vision-language model (``hf:FOLDER`` of a LLaVA...): each photo's answer
to the prompt explained token by token (``hookviz.vlm.explain``), its files written in
OUT/<photo stem>/ (``hookviz.store.vlm_files``), OUT/run.json listing what became of each, and
OUT/index.html, the explorer (``hookviz.runs.gallery``), a row per photo."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hookviz.errors import HookvizError, ImageError, UsageError, arg, describe, display_path
from hookviz.store.files import write_json

__all__ = ["DTYPES", "VlmRun", "is_vision_language_name", "run_photos"]

#: What a vision-language model computes in (``--dtype``).
DTYPES = ("float32", "bfloat16")


@dataclass(frozen=True)
class VlmRun:
    """What became of each photo: (photo, output folder, ``None`` or the reason it failed)."""

    statuses: tuple[tuple[str, str, str | None], ...]
    run_json: Path

    @property
    def failed(self) -> list[tuple[str, str, str | None]]:
        return [status for status in self.statuses if status[2] is not None]


def is_vision_language_name(name: str) -> bool:
    """Whether ``name`` is an ``hf:`` folder or cached repository whose config.json is a
    vision-language model's (read as JSON: nothing is loaded)."""
    if not isinstance(name, str) or not name.startswith("hf:"):
        return False
    from hookviz.models.sources.hf_vlm import is_vision_language, read_config
    from hookviz.models.sources.huggingface import _Where

    try:
        return is_vision_language(read_config(_Where(name, name[3:].strip(), pretrained=False)))
    except HookvizError:
        return False  # the model's own load says what is wrong, in its words


def _dtype(loaded, dtype: str):
    import torch

    if dtype not in DTYPES:
        raise UsageError(f"{arg('dtype', dtype)}: choose {' or '.join(DTYPES)}")
    return loaded.module.to(getattr(torch, dtype))


def run_photos(
    loaded, paths, request, out: Path, *, save_tensors: bool = False, dtype: str = "float32", on_photo=None, command=()
) -> VlmRun:
    """Explain each photo of ``paths`` by ``loaded`` (a ``LoadedModel`` of task ``describe``), then
    describe the run in OUT/run.json and OUT/index.html (the explorer, a row per photo) as any
    run's. A photo that fails (unreadable, or one the processor cannot take) is listed with its
    reason; the others go on. ``command``: the command line run.json records.

    Raises:
        UsageError: a request no photo could meet (an answer of no tokens, a prompt past the context).
    """
    import time

    from hookviz.runs.gallery import write_gallery
    from hookviz.store.folders import output_names
    from hookviz.store.records import ImageStatus
    from hookviz.store.vlm_files import write_vlm
    from hookviz.vlm.explain import explain_photo
    from hookviz.vlm.families.base import family_of

    started = time.time()
    model = _dtype(loaded, dtype)
    family_of(model, loaded.name)
    modules = dict(model.named_modules())
    names = output_names([Path(path) for path in paths])
    statuses: list[tuple[str, str, str | None]] = []
    entries: list[ImageStatus] = []
    layers: dict[str, None] = {}
    for path in paths:
        folder, shown = out / names[Path(path)], display_path(path)
        try:
            explanation = explain_photo(model, loaded.processor, _photo(path), request)
            written = write_vlm(
                explanation, folder, image=shown, model=loaded.name, weights=loaded.weights, save_tensors=save_tensors
            )
            layers.update((m.layer, None) for m in explanation.maps if m.layer in modules)  # not pixels, language, photo
            statuses.append((shown, str(folder), None))
            entries.append(ImageStatus(shown, folder.name, "done", None, files=tuple(p.name for p in written), task=loaded.task))
        except ImageError as exc:
            statuses.append((shown, str(folder), f"{shown}: {exc}"))
            entries.append(ImageStatus(shown, folder.name, "failed", f"{shown}: {exc}", task=loaded.task))
        if on_photo is not None:
            on_photo(statuses[-1])
    record = _record(loaded, tuple(entries), tuple(layers), command, started)
    run_json = write_json(out / "run.json", record.to_json())
    write_gallery(out, record)
    return VlmRun(tuple(statuses), run_json)


def _photo(path):
    """The photo at ``path`` in RGB.

    Raises:
        ImageError: it cannot be read as one.
    """
    from PIL import Image

    try:
        with Image.open(path) as opened:
            return opened.convert("RGB")
    except (OSError, ValueError) as exc:
        raise ImageError(f"cannot read it as a photo ({describe(exc)})") from None


def _record(loaded, entries: tuple, layers: tuple[str, ...], command, started: float):
    """run.json's record of the run: as a run of another model writes it (``store.run_records``)."""
    import platform
    import time

    import torch
    import torchvision

    from hookviz import __version__
    from hookviz.options.checks import CheckOptions
    from hookviz.store.records import Checks, Counts, RunRecord

    return RunRecord(
        hookviz=__version__,
        torch=torch.__version__,
        torchvision=torchvision.__version__,
        python=platform.python_version(),
        command=tuple(display_path(a) for a in command),
        model=loaded.name,
        weights=loaded.weights,
        task=loaded.task,
        device=str(next(loaded.module.parameters()).device),
        layers=layers,
        started=time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        seconds=round(time.time() - started, 3),
        counts=Counts(len(entries), *(sum(e.status == s for e in entries) for s in ("done", "failed", "skipped", "not_done"))),
        images=entries,
        checks=Checks(dead_fraction=CheckOptions().dead_fraction),  # none run: their options are refused
    )


def request_of(groups: dict, answer, max_new_tokens: int, tokens, words):
    """``hookviz run``'s option groups and its vision-language options as a ``VlmRequest``.

    Raises:
        UsageError: no prompt, or options a vision-language model cannot take.
    """
    from hookviz.vlm.explain import VlmRequest

    model, target = groups["model"], groups["target"]
    if not model.prompts:
        raise UsageError(
            f"{arg('model', model.name)} is a vision-language model: give {arg('prompts', 'TEXT')}, the question about the photo"
        )
    if target.target != "top1" or target.topk != 1:
        raise UsageError(
            f"{arg('target', target.target)}: a vision-language model's targets are its answer's tokens; give --tokens or --words"
        )
    _refuse_unmet(groups)
    steps = next((s.steps for s in target.settings if hasattr(s, "steps") and hasattr(s, "ig_baseline")), 16)
    return VlmRequest(
        str(model.prompts[0]),
        answer,
        max_new_tokens,
        tokens,
        words,
        target.methods or ("gradcam",),
        tuple(groups["layers"].layers),
        "logit" if target.objective == "ce" else target.objective,
        steps if isinstance(steps, int) else 16,
    )


def refuse_vlm_options(answer, max_new_tokens: int, tokens, words, dtype: str) -> None:
    """Refuse a vision-language model's options given for another model."""
    given = {"answer": answer, "tokens": tokens, "words": words}
    given |= {"max_new_tokens": max_new_tokens} if max_new_tokens != 16 else {}
    given |= {"dtype": dtype} if dtype != "float32" else {}
    for name, value in given.items():
        if value is not None:
            raise UsageError(f"{arg(name, value)}: only a vision-language model (hf:FOLDER of a LLaVA...) takes it")


def _refuse_unmet(groups: dict) -> None:
    """Refuse, in one line each, the run's options a vision-language model's run does not honour
    (never silently ignored)."""
    options, checks, trust = groups["options"], groups["checks"], groups["trust"]
    unmet = {
        "skip_existing": options.skip_existing,
        "shard": options.shard,
        "tensorboard": options.tensorboard,
        "labels": options.labels,
        "fail_on": ",".join(checks.fail_on) or None,
        "baseline": checks.baseline,
        "faithfulness": trust.faithfulness,
        "sanity": trust.sanity,
        "top_channels": groups["pictures"].top_channels,
    }
    for name, value in unmet.items():
        if value:
            named = arg(name) if value is True else arg(name, value)
            raise UsageError(f"{named}: a vision-language model's run does not take it yet; drop it")
