"""Runner: one process over many images.

Photos are decoded in a background thread (``loader``), explained in batches, and each
image's files are drawn and written by a pool of worker processes while the next batch
computes. Only a bounded number of images are in flight, so memory does not grow with
the number of images. An image that fails (an unreadable file, a model that raises on
it) is recorded and the run goes on. ``run.json`` (``run-K-of-N.json`` for a shard)
describes the run, also when it is interrupted or stopped by an error.

A run is a ``Run`` whose steps can be read and tested alone: ``start`` (workers and
loader, before torch is even imported), ``load`` (model and explainer), ``batches``,
``explain``, ``submit``, ``collect`` and ``finish``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from hookviz.budget import check_environment, recorded_bytes, rows_within
from hookviz.errors import HookvizError, ImageError, UsageError, arg, describe, display_path, first_line
from hookviz.explaining.checks import nonfinite_notes, report_checks, run_checks
from hookviz.explaining.passes import SummaryOptions
from hookviz.explaining.trust import check_options as check_trust_options
from hookviz.options import (
    CheckOptions,
    InputOptions,
    LayerOptions,
    ModelOptions,
    PictureOptions,
    RunOptions,
    TargetOptions,
    TrustOptions,
)
from hookviz.runs import workers
from hookviz.runs.cluster import cpu_share, resolve_device, run_file_name, shard_of
from hookviz.runs.outcomes import ImageOutcomes, failure_reason, writing_failure
from hookviz.runs.request import RunRequest
from hookviz.runs.sample_table import label_of, read_labels
from hookviz.runs.stopping import RunState, Stopped, stoppable
from hookviz.runs.summary import RunInterrupted, RunSummary, start_line
from hookviz.store.files import (
    Recipe,
    output_names,
    plan_folders,
    save_explanation,
    sweep_stale_files,
    write_json,
)
from hookviz.store.outfolder import FolderLock, check_out, claim_out
from hookviz.store.records import ImageStatus, RunRecord

if TYPE_CHECKING:
    from hookviz.compare.diffing import Baseline

__all__ = ["Run", "run", "RunSummary", "ImageStatus", "RunInterrupted", "resolve_device", "shard_of", "run_file_name"]


def run(
    images: Sequence[Path] | Mapping,
    model: ModelOptions,
    *,
    layers: LayerOptions = LayerOptions(),
    inputs: InputOptions = InputOptions(),
    target: TargetOptions = TargetOptions(),
    pictures: PictureOptions = PictureOptions(),
    options: RunOptions = RunOptions(),
    checks: CheckOptions = CheckOptions(),
    task_options: Sequence = (),
    trust: TrustOptions = TrustOptions(),
    on_status: Callable[[ImageStatus, int, int], None] | None = None,
    on_start: Callable[[str], None] | None = None,
    sample_options: Sequence = (),
    sources: Sequence[str] | None = None,
) -> RunSummary:
    """Explain every image and write its files under ``options.out``.

    Args:
        images: image paths, in order (the full list; ``options.shard`` picks a slice of it); or, for
            a model of several inputs, a mapping of forward argument (name or position) to file or folder.
        task_options: tasks' own option groups (``hookviz.tasks.DetectOptions(...)``); the
            model's task takes its own.
        on_status: called after each image with (status, images finished, images in this run).
        on_start: called once with a line saying what will run (model, layers, device).
        trust: how far to trust each CAM (``hookviz.trust``): per image in report.json and its
            pictures, over the run in run.json's ``trust``.
        sample_options: sample kinds' option groups; the model's kind takes its own.
        sources: where ``images`` were found as photos: a model of another sample kind finds its own there.

    Returns:
        The summary; ``run.json`` is written too.

    Raises:
        UsageError (and subclasses): bad model, weights, layer, target or output folder.
        RunInterrupted: Ctrl-C or SIGTERM; files finished so far are complete.
    """
    workers.refuse_in_a_starting_worker()
    if isinstance(images, Mapping):  # a model of several inputs: the mapping binds them (``hookviz.samples.multi``)
        from hookviz.samples.multi_bindings import bound_to

        sample_options, images, sources = bound_to(sample_options, images), (), ()
    groups = dict(layers=layers, inputs=inputs, target=target, pictures=pictures, options=options, checks=checks)
    return Run(
        images,
        model,
        **groups,
        task_options=task_options,
        trust=trust,
        on_status=on_status,
        on_start=on_start,
        sample_options=sample_options,
        sources=sources,
    ).execute()


class Run:
    """One run over many images (see ``run`` for the arguments), kept in four parts: what it
    was asked (``asked``), what became of its images (``outcomes``), its renderers and what they
    hold (``renderers``), and its phase and how it ends (``state``)."""

    def __init__(
        self,
        images: Sequence[Path],
        model: ModelOptions,
        *,
        layers=LayerOptions(),
        inputs=InputOptions(),
        target=TargetOptions(),
        pictures=PictureOptions(),
        options=RunOptions(),
        checks=CheckOptions(),
        task_options=(),
        trust=TrustOptions(),
        on_status=None,
        on_start=None,
        sample_options=(),
        sources=None,
    ):
        from hookviz.samples.multi_bindings import with_sources

        sample_options = with_sources(sample_options, sources if sources is not None else images)
        given = (tuple(images), model, layers, inputs, target, pictures, options, checks, tuple(task_options), trust, on_start)
        self.asked = RunRequest(*given, tuple(sample_options), None if sources is None else tuple(sources))
        self.outcomes = ImageOutcomes(len(self.asked.selected), on_status)
        self.renderers = workers.Renderers()
        self.state = RunState()
        self.names = output_names(self.asked.images)  # each image's folder (``_resume`` settles them)
        self.hold = FolderLock(options.out, options.shard)  # no other run writes into out meanwhile
        self.explainer = self.device = self.loader = None
        self.batch_size = options.batch_size
        self.sized = False  # whether the first image's recording has sized the batches
        self.baseline: Baseline | None = None  # read before any work (--baseline)
        self.labels = read_labels(options.labels) if options.labels is not None else {}  # --labels, read before any work

    # -- the whole run

    def execute(self) -> RunSummary:
        try:
            check_out(self.asked.out, self.asked.images)
            check_trust_options(self.asked.target, self.asked.trust)  # what no model could take, refused before one loads
            check_environment()
            if self.asked.out.is_dir():  # refused before the model loads, when a run is there now
                self.hold.acquire(create=False)
            if self.asked.checks.baseline is not None:
                from hookviz.compare.diffing import Baseline

                self.baseline = Baseline.open(self.asked.checks, self.asked.options)
            if self.asked.options.tensorboard is not None:
                from hookviz.store.tensorboard import check_logdir

                check_logdir(self.asked.options.tensorboard)
            self.start()
            self.load()
            self.state.begin_batches()
            for batch in self.batches():
                for path, result in self.explain(batch):
                    self.submit(path, result)
                self.collect(block_until=max(2 * self.renderers.workers, self.batch_size))
                if self.state.stop_asked:
                    break
            self.collect(block_until=0)
        except KeyboardInterrupt:  # before the loop; in it, a stop is asked for with request_stop()
            self.state.request_stop()
        except Exception as error:
            self.state.fail(str(error) if isinstance(error, HookvizError) else describe(error))
            raise
        finally:
            try:
                if self.state.begin_finishing():
                    self.cancel()
                summary = self.finish()
            finally:
                self.hold.release()
        if self.state.interrupted:
            raise RunInterrupted(summary)
        return summary

    def request_stop(self) -> None:
        """Stop soon: the batch being explained is abandoned at its next module, images with
        the render workers are finished, the rest are not done. Safe to call from a signal
        handler (it only sets a flag)."""
        self.state.request_stop()

    def abandon(self) -> RunSummary:
        """End the run now, from a signal handler (a second Ctrl-C): the render workers are
        killed mid-picture and the run file says which images were finished. Every file is
        written under a temporary name and renamed into place, so none is left half-written
        under its real name, and the temporary files they and this process began are deleted.
        The process must end right after (``os._exit``)."""
        self.state.interrupt()
        self.outcomes.silence()  # nothing more is printed or logged
        self.renderers.board = None
        finished = [item for item in self.renderers.pending if item[2].done() and not workers.broken(item[2])]
        killed = self.renderers.pool.kill(release=True)  # the rest fail now, as not done
        for path, explanation, future in finished:
            with contextlib.suppress(HookvizError):
                self.outcomes.report(path, self._saved(path, explanation, future))
        from hookviz.store.files import remove_reports_since

        unclaimed = [self.asked.out / self.names[item[0]] for item in self.renderers.pending if item not in finished]
        remove_reports_since(unclaimed, self.outcomes.started)  # a killed worker's, whose result never came back
        self.renderers.pending = []
        summary = self._describe()
        if self.explainer is not None:  # the files the killed workers and the stopped writes began
            sweep_stale_files(self.asked.out, writers={os.getpid(), *killed})
        return summary

    # -- steps

    def start(self) -> None:
        """Start the render workers and (unless resuming) the loader: both work while this
        process imports torch and builds the model."""
        wanted = self.asked.options.workers or cpu_share()
        limit = 2 * (os.cpu_count() or 1)
        if wanted > limit:
            self.outcomes.notes.append(f"{arg('workers', wanted)}: using {limit}, twice this machine's {os.cpu_count()} CPUs")
        # No more render processes than images: a one-photo smoke check on a 64-core
        # machine starts none (its pictures are drawn here: nothing else to do meanwhile).
        self.renderers.workers = max(1, min(wanted, limit, len(self.asked.selected)))
        pictures = bool(self.asked.pictures.pictures)
        self.renderers.pool = workers.render_pool(
            self.renderers.workers if pictures and len(self.asked.selected) > 1 else 0, draws=pictures
        )
        self.renderers.pool.warm_up()
        if not self.asked.options.skip_existing:
            self._start_loader(self.asked.selected)

    def _start_loader(self, paths: list[Path]) -> None:
        from hookviz.inputs.loader import ImageLoader

        kind = self.explainer.kind if self.explainer is not None else None  # a photo's until the model says
        self.loader = ImageLoader(
            paths,
            self.asked.inputs.max_pixels,
            limit=max(2, 2 * self.asked.options.batch_size),
            stop=self.state.stopping,
            kind=kind,
            settings=self.explainer.sample_settings if self.explainer is not None else None,
        ).start()

    def load(self) -> None:
        """Load the model and build the explainer; create the output folder only once
        everything it needs has been checked."""
        from hookviz.explaining.explainer import Explainer, check_named_task
        from hookviz.models.loading import load_model

        check_named_task(self.asked.model.task, self.asked.task_options)
        self.device = resolve_device(self.asked.model.device)
        loaded = load_model(self.asked.model)
        loaded.module.to(self.device)
        explainer = Explainer.create(
            loaded,
            layers=self.asked.layers,
            inputs=self.asked.inputs,
            target=self.asked.target,
            task_options=self.asked.task_options,
            trust=self.asked.trust,
            sample_options=self.asked.sample_options,
        )
        explainer.check_photos()  # a model of signals or clips given photos: refused once, before any image
        self._find_samples(explainer.kind, explainer.sample_settings)
        out = self.asked.out
        claim_out(out, self.hold)
        self.explainer = explainer  # set once the folder exists: ``finish`` then describes the run in it
        sweep_stale_files(out)
        if self.asked.options.tensorboard is not None:
            from hookviz.store.tensorboard import TensorBoardLog

            self.renderers.board = TensorBoardLog(self.asked.options.tensorboard)
        todo = self._resume()
        if self.loader is not None and self.loader.kind.name != explainer.kind.name:  # the model's samples are no photos
            self.loader.stop()
            self.loader = None
        if self.loader is None:
            self._start_loader(todo)
        self.loader.set_preprocessing(self.explainer.preprocessing)
        if self.asked.on_start:
            self.asked.on_start(start_line(self.explainer, self.device, self.batch_size, self.asked.run_json.name))

    def _find_samples(self, kind, settings) -> None:
        """The run's samples as the model's ``kind`` finds them (``RunRequest.found_by``), before the output folder is made."""
        self.outcomes.trust.noun = kind.noun  # before --skip-existing reads the kept reports' measures
        asked = self.asked.found_by(kind, self.outcomes.notes, settings)
        if asked is not self.asked:
            check_out(asked.out, asked.images)
            self.asked, self.names, self.outcomes.total = asked, output_names(asked.images), len(asked.selected)

    def _resume(self) -> list[Path]:
        """Give each selected image its folder and return those still to do (``store.folders.plan_folders``;
        with ``skip_existing``, an image already done by this run's recipe is skipped)."""
        recipe = (
            Recipe.of(self.explainer, self.asked.pictures, self.asked.options.save_tensors, self.asked.trust)
            if self.asked.options.skip_existing
            else None
        )
        folders = plan_folders(self.asked.out, self.asked.selected, self.names, recipe, self.explainer.kind.match)
        self.names = folders.names
        for path in folders.done:
            report = folders.reports[path]
            if self.asked.checks.fail_on:  # judged as a fresh run would judge it: a resumed CI run fails alike
                self.outcomes.findings.extend(
                    report_checks(report, display_path(path), self.asked.checks.fail_on, self.asked.checks.dead_fraction)
                )
            self.outcomes.trust.add_report(report)  # and ranked with the others
            status = ImageStatus(display_path(path), self.names[path], "skipped", "already done (skip_existing)")
            self.outcomes.report(path, replace(status, task=report.task or status.task))
        return list(folders.todo)

    def batches(self) -> Iterator[list[tuple[Path, object]]]:
        """Batches of prepared photos; photos that cannot be used fail on the way.

        The first batch is one image: what it records sizes the others. With pictures,
        batches then double, so the renderers start early and always have work.
        """
        items = iter(self.loader)
        wanted = 1
        while not self.state.stop_asked:
            batch = []
            for path, prepared in items:
                if isinstance(prepared, ImageError):
                    self.outcomes.report(path, self._failed(path, str(prepared)))
                    continue
                batch.append((path, prepared))
                if len(batch) >= wanted:
                    break
            if not batch:
                return
            yield batch
            wanted = min(self.batch_size, 2 * wanted) if self.asked.pictures.pictures else self.batch_size

    def explain(self, batch: list[tuple[Path, object]]) -> list[tuple[Path, object]]:
        """``(path, Explanation or the reason it failed)`` for each photo of ``batch``.

        Photos of different sizes (a segmenter's or a detector's, which keep their aspect)
        go through the model in groups of one size. When the model raises on a batch, its
        photos are tried one by one, so only the ones it fails on fail. A usage error (a
        target the model lacks) stops the run. A stop asked for meanwhile abandons the
        pass at the next module: its photos get no result (they are not done).
        """
        sizes: dict[tuple, list] = {}
        for item in batch:
            sizes.setdefault(tuple(tuple(t.shape) for t in item[1].tensors.values()), []).append(item)
        if len(sizes) > 1:
            return [result for group in sizes.values() for result in self.explain(group)]
        summaries = SummaryOptions(
            channels=self.asked.pictures.channels,
            grad_tiles=self.asked.pictures.grad_channels,
            keep_tensors=self.asked.options.save_tensors,
            histograms=self.renderers.board is not None,
        )
        try:
            with stoppable(self.explainer.model.module, self.state.stopping):
                explanations = self.explainer.explain_batch([prepared for _, prepared in batch], summaries)
        except Stopped:  # abandoned midway: these images are not done
            return []
        except UsageError:
            raise
        except Exception as exc:  # the model is foreign code: its failure costs these images, not the run
            if len(batch) > 1:
                return [result for item in batch for result in self.explain([item])]
            return [(batch[0][0], failure_reason(batch[0][0], exc))]
        if not self.sized:
            self._size_batches(explanations[0])
        if self.asked.pictures.top_channels and self.explainer is not None:
            from hookviz.concepts.glocal import with_top_channels

            inputs = [prepared.tensor.to(self.device) for _, prepared in batch]
            explanations = [
                with_top_channels(e, x, self.explainer.model, self.asked.pictures) for e, x in zip(explanations, inputs)
            ]
        return [(path, explanation) for (path, _), explanation in zip(batch, explanations)]

    def _size_batches(self, explanation) -> None:
        # Batches hold every recorded tensor (values, copies, gradients) at once: what the
        # first image recorded sizes them, so recording all 53 convolutions of resnet50
        # runs one image at a time.
        self.sized = True
        per_image = recorded_bytes(explanation)
        self.batch_size = rows_within(per_image, self.asked.options.memory_budget, self.asked.options.batch_size)
        self.loader.hold_at_most(max(2, 2 * self.batch_size))  # photos may be large too

    def submit(self, path: Path, result) -> None:
        """Hand one explanation to the render workers (or record why the image failed)."""
        if isinstance(result, str):
            self.outcomes.report(path, self._failed(path, result))
            return
        # --fail-on nonfinite says each such map as a finding; its note would say it twice
        said = set(nonfinite_notes(result)) if "nonfinite" in self.asked.checks.fail_on else set()
        for note in (*result.notes, *(n for layer in result.layers for n in (layer.notes or ()))):
            if note not in said:
                self.outcomes.note(note)
        for layer in result.layers:
            # (an image with nothing to explain says so once, in its own note)
            if result.target is None:
                continue
            for method, cam_note in layer.cam_notes.items():
                note = f"{layer.name}: {cam_note}" if method == result.cam_method else f"{layer.name} ({method}): {cam_note}"
                self.outcomes.note(note)
        if self.asked.checks.fail_on:
            self.outcomes.findings.extend(run_checks(result, self.asked.checks.fail_on, self.asked.checks.dead_fraction))
        self.outcomes.trust.add(result)
        portable = workers.portable(result)
        self.renderers.pending.append((path, portable, self._send(path, portable)))

    def _send(self, path: Path, explanation) -> Future:
        out = self.asked.out / self.names[path]
        return self.renderers.pool.submit(
            self.asked.step_of[path],
            save_explanation,
            explanation,
            out,
            self.asked.pictures,
            save_tensors=self.asked.options.save_tensors,
        )

    def collect(self, block_until: int) -> None:
        """Wait for written images until at most ``block_until`` are in flight."""
        while len(self.renderers.pending) > block_until:
            if workers.broken(self.renderers.pending[0][2]):
                self._restart_workers()
                continue
            path, explanation, future = self.renderers.pending.pop(0)
            self.outcomes.report(path, self._saved(path, explanation, future))

    def _restart_workers(self) -> None:
        """A render worker died (the OOM killer, ``kill -9``): its image fails, a fresh pool draws the rest."""
        lost, killed = self.renderers.pool.restart()
        sweep_stale_files(self.asked.out, writers=killed)  # the files the old pool's workers began
        dead = [path for path, _, _ in self.renderers.pending if self.asked.step_of[path] in lost]
        self.outcomes.notes += [workers.killed_note([display_path(path) for path in dead])] if dead else []
        for path in dead:
            self.outcomes.report(path, self._failed(path, f"{display_path(path)}: {workers.killed_reason()}"))
        left = [(path, explanation, future) for path, explanation, future in self.renderers.pending if path not in dead]
        self.renderers.pending = [(path, e, self._send(path, e) if workers.broken(f) else f) for path, e, f in left]

    def _saved(self, path: Path, explanation, future: Future) -> ImageStatus:
        try:
            files = future.result()
            if self.renderers.board is not None:
                self.renderers.board.add(self.asked.step_of[path], explanation, files)
        except HookvizError as exc:
            return self._failed(path, str(exc))
        except OSError as exc:  # a full disk stops the run: every image after this one would fail the same way
            return self._failed(path, writing_failure(path, self.asked.out, exc))
        except Exception as exc:  # a rendering bug must cost this image, not the whole run
            return self._failed(path, f"{display_path(path)}: saving failed ({describe(exc)})")
        target = explanation.target.to_json() if explanation.target is not None else None
        return ImageStatus(
            display_path(path),
            self.names[path],
            "done",
            None,
            target,
            tuple(p.name for p in files),
            tuple(score.to_json() for score in explanation.top5),
            explanation.task,
        )

    def cancel(self) -> None:
        """Stop taking photos; images already with a worker are finished, the rest are not done."""
        if self.loader is not None:
            self.loader.stop()
        for _, _, future in self.renderers.pending:
            future.cancel()
        self.renderers.pending = [item for item in self.renderers.pending if not item[2].cancelled()]
        self.collect(block_until=0)

    def finish(self) -> RunSummary:
        """Stop the helpers and describe the run in its run file and the gallery."""
        if self.loader is not None:
            self.loader.stop()
        if self.renderers.pool is not None:
            if self.state.error is not None:  # what the workers are drawing is not kept: no need to wait for it
                self.renderers.pool.kill()
            self.renderers.pool.shutdown()  # and the workers have exited
        if self.renderers.board is not None:
            self.renderers.board.close()
        return self._describe()

    def _describe(self) -> RunSummary:
        """The summary, written to the run file and the gallery (once the output folder exists)."""
        from hookviz.runs.gallery import write_gallery
        from hookviz.samples.base import counted_noun

        reason = self.state.unfinished_reason
        if reason is not None:
            for path in self.asked.selected:
                self.outcomes.statuses.setdefault(path, self._status(path, "not_done", reason))
        trust = self.outcomes.trust.to_json()
        statuses = tuple(self.outcomes.statuses[p] for p in self.asked.selected if p in self.outcomes.statuses)
        if self.labels:
            statuses = tuple(replace(s, label=label_of(self.labels, s.image, s.output)) for s in statuses)
        summary = RunSummary(
            statuses=statuses,
            findings=tuple(self.outcomes.findings),
            run_json=self.asked.run_json,
            interrupted=self.state.interrupted,
            layers=tuple(spec.label for spec in self.explainer.layers) if self.explainer else (),
            notes=(*self.outcomes.notes, *(trust["summary"] if trust else ())),
            trust=trust,
            noun=counted_noun(self.explainer.kind) if self.explainer else "image",
        )
        if self.explainer is None:
            return summary  # stopped before the output folder was made: nothing to describe
        document = RunRecord.of(
            summary,
            explainer=self.explainer,
            device=self.device,
            options=self.asked.options,
            checks=self.asked.checks,
            started=self.outcomes.started,
            error=self.state.error,
            images=len(self.asked.selected),
        )
        failure = None
        if self.baseline is not None and not self.state.interrupted and self.state.error is None:
            try:
                summary, document = self.baseline.compare(summary, document, self.asked.out, bool(self.asked.pictures.pictures))
            except Exception as error:  # the run's own files are complete: describe them, then stop
                self.state.fail(
                    str(error) if isinstance(error, HookvizError) else f"comparing with the baseline: {describe(error)}"
                )
                document = replace(document, error=self.state.error)
                failure = error
        try:
            atlas = self.asked.pictures.atlas  # the explorer links its channels (``--atlas``)
            write_json(self.asked.run_json, {**document.to_json(), **({"atlas": str(atlas)} if atlas is not None else {})})
            write_gallery(self.asked.out, document)
        except OSError as exc:
            raise HookvizError(
                f"could not write {display_path(self.asked.run_json)} or index.html ({exc.strerror or first_line(exc)}); "
                "each image whose report.json exists is complete"
            ) from None
        if failure is not None:
            raise failure
        return summary

    # -- helpers

    def _failed(self, path: Path, reason: str) -> ImageStatus:
        return self._status(path, "failed", reason)

    def _status(self, path: Path, status: str, reason: str) -> ImageStatus:
        """An image's status without results: under the run's task (a detector's failed photo is not a classifier's)."""
        entry = ImageStatus(display_path(path), self.names[path], status, reason)
        return entry if self.explainer is None else replace(entry, task=self.explainer.model.task)
