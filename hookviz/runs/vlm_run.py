"""``hookviz run`` of a vision-language model (``hf:FOLDER`` of a LLaVA...): each photo's answer
to the prompt explained token by token (``hookviz.vlm.explain``), its files written in
OUT/<photo stem>/ (``hookviz.store.vlm_files``), OUT/run.json listing what became of each, and
OUT/index.html, the explorer (``hookviz.runs.gallery``), a row per photo. Ctrl-C stops it as it
stops any run (``runs.stopping``). The run's options it does not honour are refused in one line
each (``refuse_unmet``), never silently ignored."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from hookviz.errors import HookvizError, ImageError, UsageError, arg, describe, display_path
from hookviz.options import DEFAULT_MAX_PIXELS
from hookviz.runs.outcomes import failure_reason, writing_failure
from hookviz.runs.stopping import RunState, Stopped, stoppable
from hookviz.runs.summary import RunInterrupted, RunSummary
from hookviz.store.files import write_json
from hookviz.store.records import ImageStatus

if TYPE_CHECKING:
    from hookviz.models.sources.base import LoadedModel

__all__ = ["DTYPES", "HONOURED", "VlmOptions", "VlmRunner", "is_vision_language_name", "refuse_unmet", "request_of"]

#: What a vision-language model computes in (``--dtype``).
DTYPES = ("float32", "bfloat16")

#: ``hookviz run``'s options a vision-language model's run honours; any other given is refused
#: (``refuse_unmet``). ``--device`` only as ``cpu`` or ``auto`` (which is the CPU for it).
HONOURED = frozenset(
    "images model weights seed prompt prompts layer cam objective answer max_new_tokens tokens words dtype "
    "from_list max_pixels device out save_tensors skip_existing shard json_output quiet verbose debug".split()
)


@dataclass(frozen=True)
class VlmOptions:
    """How a vision-language model's run goes: what the model computes in (``dtype``), the
    largest photo taken (``max_pixels``), whether tensors.npz is written, the command line run.json
    records, whether a photo done already by the same recipe is skipped (``skip_existing``,
    ``runs.vlm_resume``), and the ``(K, N)`` slice of the photos this process explains (``shard``:
    its own run file, ``run-K-of-N.json``, beside the other shards' in one folder)."""

    dtype: str = "float32"
    max_pixels: int = DEFAULT_MAX_PIXELS
    save_tensors: bool = False
    command: tuple[str, ...] = ()
    skip_existing: bool = False
    shard: tuple[int, int] | None = None


def is_vision_language_name(name: str) -> bool:
    """Whether ``name`` is an ``hf:`` folder or cached repository whose config.json is a
    vision-language model's (read as JSON: nothing is loaded)."""
    if not isinstance(name, str) or not name.startswith("hf:"):
        return False
    try:
        return _reads_as_vision_language(name)
    except HookvizError:
        return False  # the model's own load says what is wrong, in its words


def _reads_as_vision_language(name: str) -> bool:
    """Whether the ``hf:`` model ``name``'s config.json is a vision-language model's.

    Raises:
        HookvizError: it cannot be read (no such folder, a folder naming its own code...).
    """
    from hookviz.models.sources.hf_vlm import is_vision_language, read_config
    from hookviz.models.sources.huggingface import _Where

    return is_vision_language(read_config(_Where(name, name[3:].strip(), pretrained=False)))


def _dtype(loaded, dtype: str):
    import torch

    if dtype not in DTYPES:
        raise UsageError(f"{arg('dtype', dtype)}: choose {' or '.join(DTYPES)}")
    return loaded.module.to(getattr(torch, dtype))


class VlmRunner:
    """``hookviz run`` of a vision-language model over ``paths``: the model loaded from ``model`` (a
    ``ModelOptions``), each photo's answer to ``request`` explained in OUT/<photo stem>/, then
    OUT/run.json and OUT/index.html. A photo that fails (unreadable, one the processor cannot
    take, an answer of nothing to explain, the model raising on it: any error but a ``UsageError``,
    in the words of a run of another model, ``outcomes.failure_reason``) is listed with its reason;
    the others go on. ``on_start()`` is called once the model is
    loaded (``on_start(line)``: what will run), ``on_photo(status, line)`` after each photo (``line``: what a photo done says, else ``None``).

    It stops as a run of another model does (``runner.Run``, through ``process.Stopper``):
    ``request_stop`` (a first Ctrl-C or SIGTERM) ends the photo being explained at the model's
    next module (its files are written whole or not at all), and run.json then lists the photos
    finished and the others as not done; while the model loads, the run ends there and then
    (nothing written); ``abandon`` (a second signal) describes the run at once."""

    def __init__(self, model, paths, request, out: Path, *, options: VlmOptions = VlmOptions(), on_start=None, on_photo=None):
        from hookviz.runs.cluster import run_file_name, shard_of
        from hookviz.runs.vlm_resume import recipe_of
        from hookviz.store.folders import output_names
        from hookviz.store.outfolder import FolderLock

        self.model_options, self.request, self.out, self.options = model, request, Path(out), options
        every = [Path(path) for path in paths]
        self.names = output_names(every)  # of the whole list: each shard gives a photo the same folder
        self.paths = shard_of(every, options.shard)
        self.run_json = self.out / run_file_name(options.shard)
        self.recipe = recipe_of(request, options.dtype, options.max_pixels)  # what each report keeps of how it was made
        self.on_start, self.on_photo = on_start, on_photo
        self.state = RunState()
        self.hold = FolderLock(self.out, options.shard)  # no other run (or this shard) writes into out meanwhile
        self.statuses: dict[Path, ImageStatus] = {}
        self.layers: dict[str, None] = {}
        self.loaded: LoadedModel | None = None
        self.started = time.time()

    def execute(self) -> RunSummary:
        """Every photo explained; the summary (run.json written too).

        Raises:
            UsageError: a request no photo could meet (an answer of no tokens, a prompt past the context).
            RunInterrupted: Ctrl-C or SIGTERM; the files of the photos finished are complete.
        """
        from hookviz.store.outfolder import check_out

        try:
            check_out(self.out, self.paths)
            if self.out.is_dir():  # refused before the model loads, when a run is there now
                self.hold.acquire(create=False)
            model, loaded = self._load()
            todo = self._plan(loaded)
            self.state.begin_batches()
            for path in self.paths:
                if self.state.stop_asked:
                    break
                if path in todo:
                    self._explain(model, loaded, path)
        except KeyboardInterrupt:  # while the model loads (``process.Stopper``); later a stop is asked for
            self.state.request_stop()
        except Exception as error:
            self.state.fail(str(error) if isinstance(error, HookvizError) else describe(error))
            raise
        finally:
            try:
                self.state.begin_finishing()
                summary = self._describe()
            finally:
                self.hold.release()
        if self.state.interrupted:
            raise RunInterrupted(summary)
        return summary

    def request_stop(self) -> None:
        """Stop soon (safe from a signal handler: it only sets a flag)."""
        self.state.request_stop()

    def abandon(self) -> RunSummary:
        """End the run now, from a signal handler (a second Ctrl-C): run.json says which photos
        were finished, and the temporary files this process began are deleted (every file is
        renamed into place when whole). The process must end right after (``os._exit``)."""
        from hookviz.store.files import sweep_stale_files

        self.state.interrupt()
        self.on_photo = None  # nothing more is printed
        summary = self._describe()
        if self.loaded is not None:
            sweep_stale_files(self.out, writers={os.getpid()})
        return summary

    def _load(self):
        from hookviz.models.loading import load_model
        from hookviz.store.files import sweep_stale_files
        from hookviz.store.outfolder import claim_out
        from hookviz.vlm.families.base import family_of

        loaded = load_model(self.model_options)
        model = _dtype(loaded, self.options.dtype)
        family = family_of(model, loaded.name)
        self.modules = set(dict(model.named_modules()))
        claim_out(self.out, self.hold)  # as any run holds its folder: no other writes there meanwhile
        sweep_stale_files(self.out)
        self.loaded = loaded  # from now on the run is described in OUT
        if self.on_start is not None:
            self.on_start(start_line(loaded, model, family, self.request, self.options.dtype))
        return model, loaded

    def _plan(self, loaded: LoadedModel) -> set[Path]:
        """Each photo's folder, never another photo's; with ``skip_existing``, the photos done
        already by this run's recipe are skipped, their layers counted as the run's
        (``runs.vlm_resume``). Returns the photos left to explain."""
        from hookviz.runs.vlm_resume import VlmRecipe, plan_vlm_folders

        recipe = (
            VlmRecipe(loaded.name, loaded.weights, self.recipe, self.options.save_tensors) if self.options.skip_existing else None
        )
        folders = plan_vlm_folders(self.out, self.paths, self.names, recipe)
        self.names.update(folders.names)
        for path in folders.done:
            self.layers.update((layer, None) for layer in folders.reports[path].layers if layer in self.modules)
            skipped = ImageStatus(
                display_path(path), self.names[path], "skipped", "already done (skip_existing)", task=loaded.task
            )
            self._report(path, skipped)
        return set(folders.todo)

    def _explain(self, model, loaded: LoadedModel, path: Path) -> None:
        """One photo explained and written (or failed); none when a stop cut its passes short."""
        from hookviz.inputs.images import load_image
        from hookviz.runs.vlm_resume import made_by
        from hookviz.store.vlm_files import write_vlm
        from hookviz.vlm.explain import explain_photo

        folder, shown = self.out / self.names[path], display_path(path)
        try:
            photo = load_image(path, self.options.max_pixels).rgb  # upright (EXIF), RGB, as a photo run reads it
        except ImageError as exc:  # its message names the photo
            self._report(path, ImageStatus(shown, folder.name, "failed", str(exc), task=loaded.task))
            return
        try:
            with stoppable(model, self.state.stopping):
                explanation = explain_photo(model, loaded.processor, photo, self.request)
        except Stopped:  # abandoned midway: not done
            return
        except UsageError:  # what no photo could meet: the run stops
            raise
        except Exception as exc:  # this photo's (one the processor cannot take, the model raising on it): as a photo run's
            self._report(path, ImageStatus(shown, folder.name, "failed", failure_reason(path, exc), task=loaded.task))
            return
        try:
            made = made_by(path, self.recipe)  # what --skip-existing compares
            written = write_vlm(
                explanation,
                folder,
                image=shown,
                model=loaded.name,
                weights=loaded.weights,
                save_tensors=self.options.save_tensors,
                made=made,
            )
        except HookvizError as exc:  # an error of its own files
            self._report(path, ImageStatus(shown, folder.name, "failed", failure_reason(path, exc), task=loaded.task))
            return
        except OSError as exc:  # the disk's: as in a photo run (a full disk stops the run)
            reason = writing_failure(path, self.out, exc)
            self._report(path, ImageStatus(shown, folder.name, "failed", reason, task=loaded.task))
            return
        self.layers.update((m.layer, None) for m in explanation.maps if m.layer in self.modules)  # not pixels, language, photo
        done = ImageStatus(shown, folder.name, "done", None, files=tuple(p.name for p in written), task=loaded.task)
        self._report(path, done, answer_line(explanation))

    def _report(self, path: Path, status: ImageStatus, line: str | None = None) -> None:
        """Record ``status``, and tell the caller (``on_photo(status, line)``; ``line``: what a
        photo done says, its answer and the tokens explained)."""
        self.statuses[path] = status
        if self.on_photo is not None:
            self.on_photo(status, line)

    def _describe(self) -> RunSummary:
        """The summary, written to run.json and index.html once the model has loaded."""
        from hookviz.runs.gallery import write_gallery

        reason = self.state.unfinished_reason
        task = self.loaded.task if self.loaded is not None else "describe"
        statuses = [
            self.statuses.get(path) or ImageStatus(display_path(path), self.names[path], "not_done", reason, task=task)
            for path in self.paths
            if path in self.statuses or reason is not None
        ]
        summary = RunSummary(tuple(statuses), (), self.run_json, self.state.interrupted, tuple(self.layers))
        if self.loaded is None:
            return summary  # stopped before the model loaded: nothing to describe
        record = replace(
            _record(self.loaded, summary, self.options.command, self.started, self.state.error), shard=self.options.shard
        )
        try:
            write_json(summary.run_json, record.to_json())
            write_gallery(self.out, record)
        except OSError as exc:
            raise HookvizError(
                f"could not write {display_path(summary.run_json)} or index.html ({exc.strerror or describe(exc)}); "
                "each photo whose report.json exists is complete"
            ) from None
        return summary


def start_line(loaded, model, family, request, dtype: str) -> str:
    """What will run, as a photo run's first line says it: the model, its weights, the device and
    dtype, the answer (given, or written by the model), the methods and where they look."""
    from hookviz.vlm.explain import MAP_MAKERS, resolve_layer

    answer = "the answer given" if request.answer is not None else f"the model's answer (up to {request.max_new_tokens} tokens)"
    line = f"model {loaded.name}, weights {loaded.weights}, on cpu in {dtype}; {answer} explained by {', '.join(request.methods)}"
    if all(method in MAP_MAKERS for method in request.methods):  # none looks at a layer of the vision tower
        return line
    return line + "; layers: " + ", ".join(resolve_layer(model, family, layer) for layer in request.layers or ("vision",))


def answer_line(explanation) -> str:
    """What a photo done says after its name, as a photo run says its target and top-5: the answer
    and the tokens explained (``answer "a cat"; explained: "cat"``)."""
    explained = " · ".join(json.dumps(target.label, ensure_ascii=False) for target in explanation.targets)
    return f"answer {json.dumps(explanation.conversation.text, ensure_ascii=False)}; explained: {explained}"


def _record(loaded, summary: RunSummary, command, started: float, error: str | None):
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
        layers=summary.layers,
        started=time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        seconds=round(time.time() - started, 3),
        interrupted=summary.interrupted,
        error=error,
        counts=Counts(len(summary.statuses), *(summary.count(s) for s in ("done", "failed", "skipped", "not_done"))),
        images=summary.statuses,
        checks=Checks(dead_fraction=CheckOptions().dead_fraction),  # none run: their options are refused
    )


def request_of(groups: dict, answer, max_new_tokens: int, tokens, words):
    """``hookviz run``'s option groups and its vision-language options as a ``VlmRequest``.

    Raises:
        UsageError: no prompt, or options a vision-language model cannot take.
    """
    from hookviz.vlm.explain import VlmRequest, steps_of

    model, target = groups["model"], groups["target"]
    if not model.prompts:
        raise UsageError(
            f"{arg('model', model.name)} is a vision-language model: give {arg('prompts', 'TEXT')}, the question about the photo"
        )
    if target.target != "top1" or target.topk != 1:
        raise UsageError(
            f"{arg('target', target.target)}: a vision-language model's targets are its answer's tokens; give --tokens or --words"
        )
    return VlmRequest(
        str(model.prompts[0]),
        answer,
        max_new_tokens,
        tokens,
        words,
        target.methods or ("gradcam",),
        tuple(groups["layers"].layers),
        target.objective,  # ce is refused: a token's cross-entropy is its -logprob
        steps_of(target.settings),
    )


def refuse_vlm_options(answer, max_new_tokens: int, tokens, words, dtype: str, model: str = "") -> None:
    """Refuse a vision-language model's options given for another model ``model``; an ``hf:`` one
    whose config cannot be read says why first (a folder naming its own code is no other model)."""
    given = {"answer": answer, "tokens": tokens, "words": words}
    given |= {"max_new_tokens": max_new_tokens} if max_new_tokens != 16 else {}
    given |= {"dtype": dtype} if dtype != "float32" else {}
    for name, value in given.items():
        if value is not None:
            if model.startswith("hf:"):
                _reads_as_vision_language(model)
            raise UsageError(f"{arg(name, value)}: only a vision-language model (hf:FOLDER of a LLaVA...) takes it")


def refuse_unmet(given: dict, groups: dict) -> None:
    """Refuse, in one line naming it, each option given that a vision-language model's run does not
    honour (never silently ignored): ``given``, the run's options given other than their defaults
    (option name -> value); and the settings methods, tasks and sample kinds declare, in ``groups``
    (``--steps`` is honoured, with integrated gradients).

    Raises:
        UsageError: the first such option.
    """
    from hookviz.options.declared import given_values
    from hookviz.runs.cluster import resolve_device

    device = given.get("device", "cpu")
    resolve_device(device)  # one that is not here: refused as any run refuses it
    if device not in ("cpu", "auto"):
        raise UsageError(f"{arg('device', device)}: a vision-language model's run computes on the CPU yet; drop it")
    unmet = [(name, value) for name, value in given.items() if name not in HONOURED]
    methods = groups["target"].methods or ()
    for group in (*groups["target"].settings, *groups["task_options"], *groups["sample_options"]):
        unmet += [(n, v) for n, v, _ in given_values(group) if not (n == "steps" and "integrated-gradients" in methods)]
    for name, value in unmet:
        named = arg(name, value) if isinstance(value, (str, int, float)) and not isinstance(value, bool) else arg(name)
        raise UsageError(f"{named}: a vision-language model's run does not take it yet; drop it")
