"""The trust measures wired into a pass: after ``explaining.passes.explain_batch`` has made each
image's CAMs, ``assess`` measures them (``TrustOptions``) and puts a ``LayerTrust`` on each
layer of each ``Explanation``, and on each map at the input's resolution (``PixelMap.trust``,
measured on its relevance map: ``pixel_trust``). ``check`` refuses, before any work, what
cannot be measured; a map that cannot be measured gets a note saying why.

Faithfulness scores the target class's probability on altered copies of each photo (the
task's ``probability_scorer``), through the bare model in eval mode, in batches of
``BATCH`` under ``torch.inference_mode``. The randomisation check explains each image's own
class again on randomised deep copies of the model, with the same layer, method and
options; the caller's model is never changed. Both keep to the memory budget
(``hookviz.budget``: a row's cost is measured on one pass of the first photo) and count their
passes as work (``hookviz.workload``).
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from hookviz.errors import UsageError, arg
from hookviz.trust.records import LayerTrust

__all__ = ["BATCH", "assess", "check", "check_options"]

#: At most this many altered photos go through the model in one faithfulness pass (fewer
#: where the memory budget holds fewer).
BATCH = 64


def check_options(target, trust) -> None:
    """Raise UsageError for ``TrustOptions`` that no model could honour with ``target``'s
    methods, or this installation cannot: checked before the model loads."""
    asked = [name for name in ("faithfulness", "sanity") if getattr(trust, name)]
    if asked and target.cam == "none":
        raise UsageError(f"{arg(asked[0])} measures a CAM; choose a {arg('cam')} method, not none")
    if trust.faithfulness and importlib.util.find_spec("scipy") is None:
        raise UsageError(f"{arg('faithfulness')}: ROAD's imputation needs scipy; pip install 'hookviz[trust]'")


def check(task, target, trust, module=None) -> None:
    """Raise UsageError for ``TrustOptions`` this task, method, model (``module``) or
    installation cannot honour."""
    check_options(target, trust)
    article = "an" if task.words[:1] in "aeiou" else "a"
    if trust.faithfulness and task.probability is None:
        raise UsageError(
            f"{arg('faithfulness')} follows the target class's probability as pixels are deleted; {article} {task.words} "
            f"model's target has no such probability; drop {arg('faithfulness')}"
        )
    if trust.sanity and not task.class_targets:
        raise UsageError(
            f"{arg('sanity')} explains each image's target again on randomised copies of the model; {article} {task.words} "
            f"model's target is made by the model itself ({task.target_words}), which a randomised copy does not make; "
            f"drop {arg('sanity')}"
        )
    if trust.sanity and module is not None:
        _check_copy(module)


def _check_copy(module) -> None:
    """Refuse ``--sanity`` once, up front, for a model that cannot be deep-copied: each image's
    check would fail alike, as if the model were at fault."""
    from hookviz.trust.sanity import copy_refusal, copy_words

    refusal = copy_refusal(module)
    if refusal is not None:
        raise UsageError(
            f"{arg('sanity')} randomises a deep copy of the model, and {copy_words(module, refusal)}; "
            f"drop {arg('sanity')}, or give the model a __deepcopy__ that copies its weights"
        )


def assess(explainer, images: Sequence, explanations: list) -> list:
    """``explanations`` (of ``images``, one pass of ``explainer``) with each map measured as
    ``explainer.trust`` asks: every layer method's map (``--cam a,b``) in its layer's ``trust``
    (the main method's in ``LayerTrust`` itself, the others' in its ``methods``), and every
    input method's relevance map (``pixel_trust``) in its ``PixelMap.trust``. A map that
    cannot be measured gets a note saying why."""
    measured = _layer_measures(explainer, images, explanations) if explainer.method is not None else {}
    pixels = _pixel_measures(explainer, images, explanations)
    main = explainer.method.name if explainer.method is not None else ""  # "": no layer method, none measured
    score = explainer.task.probability if explainer.trust.faithfulness else None

    def layer_trust(found: dict[str, dict]) -> LayerTrust:
        others = {method: LayerTrust(score, **fields) for method, fields in found.items() if method != main}
        return LayerTrust(score, **found.get(main, {}), methods=others)

    assessed = []
    for i, explanation in enumerate(explanations):
        layers = tuple(
            _measured_layer(layer, layer_trust(measured[(i, layer.name)]), main) if (i, layer.name) in measured else layer
            for layer in explanation.layers
        )
        found = replace(explanation, trust=explainer.trust.to_json(), layers=layers)
        assessed.append(_with_pixel_trust(found, pixels.get(i, {}), _unmeasured_layers(explainer, images[i], found)))
    return assessed


def _layer_measures(explainer, images, explanations) -> dict[tuple[int, str], dict[str, dict]]:
    """(image, layer) -> method -> the ``LayerTrust`` fields measured of that method's map."""
    trust = explainer.trust
    measured: dict[tuple[int, str], dict[str, dict]] = {}
    for layer in explanations[0].layers if explanations else ():  # one pass: every image has the same layers
        chosen = [i for i, explanation in enumerate(explanations) if _measurable(explanation, layer.name)]
        if not chosen:
            continue
        if trust.faithfulness:
            for method, (members, results) in _each_method(explainer, images, explanations, chosen, layer.name):
                for i, (deletion, road) in zip(members, results):
                    measured.setdefault((i, layer.name), {}).setdefault(method, {}).update(deletion=deletion, road=road)
        if trust.sanity:
            with _sanity_work(explainer, explanations, chosen, layer.name) as passes:
                checked = _sanity(explainer, images, explanations, chosen, layer, passes)
            for i, by_method in checked.items():
                for method, sanity in by_method.items():
                    measured.setdefault((i, layer.name), {}).setdefault(method, {})["sanity"] = sanity
    return measured


def _with_pixel_trust(explanation, found: dict, notes: list[str]):
    """``explanation`` with each input method's ``PixelMap.trust`` from ``found`` (method ->
    ``LayerTrust``, or why its map was not measured, in words), and the notes they call for."""
    from hookviz.trust.pixel_trust import INPUT_LAYER

    pixel_maps = dict(explanation.pixel_maps)
    for method, trust in found.items():
        if isinstance(trust, str):
            notes.append(f"{INPUT_LAYER} ({method}): not measured: {trust}")
            continue
        pixel_maps[method] = replace(pixel_maps[method], trust=trust)
        notes += trust.notes(INPUT_LAYER, method)
    if not found and not notes:
        return explanation
    return replace(explanation, pixel_maps=pixel_maps, notes=tuple(dict.fromkeys((*explanation.notes, *notes))))


def _unmeasured_layers(explainer, image, explanation) -> list[str]:
    """A note for each layer method's map that was made but could not be measured, and why."""
    if explanation.target is None:
        return []
    notes = []
    for layer in explanation.layers:
        for method in _layer_methods(explainer):
            cam = layer.cams.get(method)
            if cam is None or _measurable_map(cam, _rank(image)):
                continue  # no map: the layer's CAM note says why
            why = (
                f"its map has {cam.ndim} spatial dimensions, the input {_rank(image)}"
                if cam.ndim != _rank(image)
                else "its map is not finite (NaN or infinite values)"
            )
            notes.append(f"{layer.name} ({method}): not measured: {why}")
    return notes


def _input_methods(explainer) -> tuple[str, ...]:
    """The run's input methods (``--cam a,b``), in order."""
    return tuple(method.name for method in explainer.methods if method.resolution == "input")


def _pixel_measures(explainer, images, explanations) -> dict[int, dict]:
    """Image -> input method -> the ``LayerTrust`` of its relevance map (``pixel_trust``), or
    why it was not measured, in words."""
    from hookviz.trust.pixel_trust import INPUT_LAYER, relevance, unmeasured

    trust = explainer.trust
    found: dict[int, dict] = {}
    maps: dict[str, dict[int, np.ndarray]] = {}  # method -> image -> its relevance map
    for method in _input_methods(explainer):
        for i, explanation in enumerate(explanations):
            pixels = explanation.pixel_maps.get(method)
            why = None if pixels is None else unmeasured(pixels, _rank(images[i]), explanation.target is not None)
            if why is not None:
                found.setdefault(i, {})[method] = why
            elif pixels is not None:
                maps.setdefault(method, {})[i] = relevance(pixels.map)
    fields: dict[tuple[int, str], dict] = {}
    for method, chosen in maps.items() if trust.faithfulness else ():
        members = sorted(chosen)
        results = _faithfulness(explainer, images, explanations, members, [chosen[i] for i in members], method, INPUT_LAYER)
        for i, (deletion, road) in zip(members, results):
            fields.setdefault((i, method), {}).update(deletion=deletion, road=road)
    if trust.sanity and maps:
        everyone = sorted({i for chosen in maps.values() for i in chosen})
        with _sanity_work(explainer, explanations, everyone, INPUT_LAYER, tuple(maps)) as passes:
            checked = _pixel_sanity(explainer, images, explanations, maps, passes)
        for i, by_method in checked.items():
            for method, sanity in by_method.items():
                fields.setdefault((i, method), {})["sanity"] = sanity
    score = explainer.task.probability if trust.faithfulness else None
    for (i, method), measured in fields.items():
        found.setdefault(i, {})[method] = LayerTrust(score, **measured)
    return found


def _measured_layer(layer, trust: LayerTrust, main: str):
    """``layer`` with its ``trust``, and the notes its measures call for."""
    notes = trust.notes(layer.name, main)
    return replace(layer, trust=trust, notes=tuple(dict.fromkeys((*layer.notes, *notes))))


def _layer(explanation, name: str):
    return next(layer for layer in explanation.layers if layer.name == name)


def _measurable(explanation, name: str) -> bool:
    """Whether a layer method's map of layer ``name`` can be measured (the main one's may not:
    a NaN gradient leaves a re-scoring method's map finite)."""
    return explanation.target is not None and any(
        _measurable_map(cam, _rank(explanation.image)) for cam in _layer(explanation, name).cams.values()
    )


def _layer_methods(explainer) -> tuple[str, ...]:
    """The run's layer methods (``--cam a,b``), the main one first."""
    return tuple(method.name for method in explainer.methods if method.resolution == "layer")


def _each_method(explainer, images, explanations, chosen: list[int], name: str):
    """``(method, (images, their (DeletionInsertion, Road)))`` for each layer method of the
    run whose map of layer ``name`` can be measured."""
    layers = {i: _layer(explanations[i], name) for i in chosen}
    for method in _layer_methods(explainer):
        members = [i for i in chosen if _measurable_map(layers[i].cams.get(method), _rank(images[i]))]
        if members:
            maps = [layers[i].cams[method] for i in members]
            yield method, (members, _faithfulness(explainer, images, explanations, members, maps, method, name))


def _measurable_map(cam, rank: int) -> bool:
    """Whether ``cam`` is finite and of the input's ``rank`` (a 1-D map of a photo's rows is not
    laid over the photo)."""
    return cam is not None and cam.ndim == rank and bool(np.isfinite(cam).all())


def _rank(image) -> int:
    """The spatial dimensions of a prepared input: 2 for a photo, 1 for a signal, 3 for a clip."""
    return len(image.tensor.shape) - 1


def _faithfulness(explainer, images, explanations, chosen: list[int], maps: list, method: str, name: str):
    """Per chosen image, its ``(DeletionInsertion, Road)`` of its map in ``maps``."""
    import torch

    from hookviz.explaining.passes import full_precision
    from hookviz.input_format import formats_for
    from hookviz.modelstate import evaluation
    from hookviz.trust.deletion import deletion_insertion
    from hookviz.trust.road import road

    module, options = explainer.model.module, explainer.target
    scorer = explainer.task.probability_scorer([explanations[i].target for i in chosen], options, explainer.task_options)
    samples = explainer.batch([images[i] for i in chosen])

    def score(batch, rows):
        def run():
            return scorer(samples.forward(rows, batch), rows)

        scores = formats_for(module).run(module, tuple(batch.shape), run)
        passes.advance(len(batch))
        return scores

    inputs = samples.main_input()
    stacked = torch.from_numpy(np.stack(maps))
    with evaluation(module), full_precision(explainer.device), _faithfulness_work(inputs, method, name) as passes:
        batch = _row_cost(samples, inputs).rows(explainer.device, BATCH, gradients=False)
        deletion = deletion_insertion(score, inputs, stacked, batch_size=batch)
        roads = road(score, inputs, stacked, seed=explainer.trust.seed, batch_size=batch)
    return list(zip(deletion, roads))


def _faithfulness_work(inputs, method: str, name: str):
    """The faithfulness measures' passes of ``inputs``, counted (``hookviz.workload``)."""
    from hookviz.trust.deletion import STEPS, perturbation_counts
    from hookviz.trust.road import ROAD_PERCENTILES
    from hookviz.workload import work

    count = len(inputs)
    per_photo = 2 * len(perturbation_counts(math.prod(inputs.shape[2:]), STEPS)) - 2 + 1 + 2 * len(ROAD_PERCENTILES)
    return work(f"faithfulness of {method} at {name}", count * per_photo, "altered passes", count)


def _row_cost(samples, inputs):
    """What a row of a pass holds (``hookviz.budget.RowCost``), measured on one pass of the first
    sample with its main input ``inputs[:1]``."""
    import torch

    from hookviz.budget import measuring
    from hookviz.modelstate import evaluation

    module = samples.module
    row = inputs[0].numel() * inputs.element_size()
    with torch.inference_mode(), evaluation(module), measuring(module, 1, row) as measure:
        samples.forward([0], inputs[:1])
    return measure.cost


def _sanity(explainer, images, explanations, chosen: list[int], layer, passes) -> dict[int, dict]:
    """Per chosen image, by layer method, its ``Randomisation`` of its map of ``layer``."""
    from hookviz.anatomy.layers import LayerSpec

    name = layer.name
    path, _, call = name.partition(":")  # the recorded call alone, on the copy
    spec = LayerSpec(name, path, int(call) if call else None, layer.module_type)
    cams = {i: _layer(explanations[i], name).cams for i in chosen}

    def original(i: int, method: str):
        cam = cams[i].get(method)
        return cam if _measurable_map(cam, _rank(images[i])) else None

    def pick(result, method: str):
        return _layer(result, spec.label).cams.get(method)

    return _randomised(explainer, images, explanations, chosen, _layer_methods(explainer), original, ((spec,), pick), passes)


def _pixel_sanity(explainer, images, explanations, maps: dict[str, dict[int, np.ndarray]], passes) -> dict[int, dict]:
    """Per image, by input method, the ``Randomisation`` of its relevance map in ``maps``
    (method -> image -> map), made again by each randomised copy with the run's layers."""
    from hookviz.trust.pixel_trust import relevance

    chosen = sorted({i for found in maps.values() for i in found})

    def pick(result, method: str):
        found = result.pixel_maps.get(method)
        return None if found is None or found.map is None else relevance(found.map)

    def original(i: int, method: str):
        return maps[method].get(i)

    return _randomised(explainer, images, explanations, chosen, tuple(maps), original, (explainer.layers, pick), passes)


def _randomised(explainer, images, explanations, chosen: list[int], methods: tuple, original, made, passes) -> dict[int, dict]:
    """Per chosen image, by method of ``methods``, the ``Randomisation`` of its map
    ``original(i, method)`` (``None``: not measured). ``made`` is ``(layers, pick)``: the
    layers the randomised copies record and ``pick(explanation, method)``, a method's map in a
    copy's explanation. Images of one target class share the randomised copies, and every
    method's maps come from each copy's one pass (a gradient method needs no pass of its own;
    a re-scoring one adds its re-scoring)."""
    import torch

    from hookviz.trust.sanity import cascading_randomisation

    by_class: dict[int, list[int]] = {}
    for i in chosen:
        by_class.setdefault(explanations[i].target.index, []).append(i)
    found: dict[int, dict] = {}
    for index, members in by_class.items():
        target = _copy_target(explainer.target, index, methods)
        # (method, position in members) of each map there is to compare
        pairs = [(method, k) for method in methods for k in range(len(members)) if original(members[k], method) is not None]
        if not pairs:
            continue
        maps = torch.from_numpy(np.stack([original(members[k], method) for method, k in pairs]))
        explain = _explainer_of(explainer, made, target, [images[i] for i in members], pairs, tuple(maps.shape[1:]), passes)
        results = cascading_randomisation(explainer.model.module, explain, maps, seed=explainer.trust.seed)
        for (method, k), result in zip(pairs, results):
            found.setdefault(members[k], {})[method] = result
    return found


def _sanity_work(explainer, explanations, chosen: list[int], name: str, methods: tuple[str, ...] | None = None):
    """The sanity check's passes at layer ``name`` (or of the input's maps), counted
    (``hookviz.workload``): one explained pass per parametrised module, per target class of
    the chosen images."""
    from hookviz.trust.sanity import parametrised_modules
    from hookviz.workload import work

    classes = len({explanations[i].target.index for i in chosen})
    steps = len(parametrised_modules(explainer.model.module)) * classes
    label = f"sanity check of {', '.join(methods or _layer_methods(explainer))} at {name}"
    return work(label, steps, "randomised passes", len(chosen))


def _copy_target(target, index: int, methods: tuple[str, ...]):
    """The target options of the randomised copies' passes: class ``index`` alone, by the
    run's layer methods alone, with the settings of those of them that declare any."""
    return replace(target, target=str(index), topk=1, cam=",".join(methods), settings=_kept(target.settings, methods))


def _kept(settings: tuple, methods: tuple[str, ...]) -> tuple:
    """The settings groups among ``settings`` that one of ``methods`` declares."""
    from hookviz.methods import get_method

    declared = {get_method(name).options for name in methods}
    return tuple(group for group in settings if type(group) in declared)


def _explainer_of(explainer, made, target, group: list, pairs: list, shape: tuple, passes):
    """``explain(model) -> (len(pairs), *shape)``: for each ``(method, k)`` of ``pairs``, the
    map of ``group[k]`` for ``target`` by ``method``, made with ``model`` (a randomised copy)
    and ``explainer``'s options, recording ``made``'s layers and taken from each explanation
    with ``made``'s ``pick``; a map the copy does not make counts as all zero. The group goes
    through in passes within the memory budget (``hookviz.budget``); each call advances
    ``passes`` (a ``hookviz.workload.Work``) by one."""
    import torch

    from hookviz.explaining.passes import SummaryOptions, explain_batch
    from hookviz.options import ChannelSelection

    layers, pick = made
    lean = SummaryOptions(channels=ChannelSelection(count=1), grad_tiles=False, keep_tensors=False, histograms=False)
    samples = explainer.batch(group)
    size = _row_cost(samples, samples.main_input()).rows(explainer.device, len(group), gradients=True)

    def explain(model):
        copy = replace(explainer, model=replace(explainer.model, module=model), layers=tuple(layers), target=target)
        results = [
            result for start in range(0, len(group), size) for result in explain_batch(copy, group[start : start + size], lean)
        ]
        maps = [pick(results[k], method) for method, k in pairs]
        passes.advance()
        return torch.from_numpy(np.stack([m if m is not None else np.zeros(shape, np.float32) for m in maps]))

    return explain
