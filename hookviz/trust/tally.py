"""The trust measures over a run: each map's (method and layer's, or input method's) means,
ranked, and what they say in words, for run.json and the gallery ("on these 200 photos,
layercam at layer4 deletes the class fastest"). An input method's map sits at ``the input``
(``pixel_trust.INPUT_LAYER``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from hookviz.trust.pixel_trust import INPUT_LAYER, REDUCTION

__all__ = ["TrustTally"]


@dataclass
class _Sums:
    deletion: list[float] = field(default_factory=list)
    insertion: list[float] = field(default_factory=list)
    road: list[float] = field(default_factory=list)
    saturated: int = 0
    final: list[float | None] = field(default_factory=list)
    threshold: float = 0.5

    def add(self, trust) -> None:
        """One image's areas, ROAD and randomisation check, from its ``LayerTrust``, those that were measured."""
        found, road, sanity = trust.deletion, trust.road, trust.sanity
        self._add(
            None if found is None or road is None else (found.deletion_auc, found.insertion_auc, road.combined, found.saturated),
            None if sanity is None else (sanity.threshold, sanity.final),
        )

    def add_json(self, document: dict) -> None:
        """The same, from the ``trust`` that an image's report.json keeps of one map (an image
        ``--skip-existing`` skipped counts as it did in the run that explained it)."""
        faithfulness = document.get("faithfulness") or {}
        found, road, sanity = faithfulness.get("deletion_insertion"), faithfulness.get("road"), document.get("sanity")
        measured = None
        if found and road and None not in (found.get("deletion_auc"), found.get("insertion_auc"), road.get("combined")):
            measured = (found["deletion_auc"], found["insertion_auc"], road["combined"], bool(found.get("saturated")))
        checked = (sanity.get("threshold", 0.5), sanity.get("final_correlation")) if sanity else None
        self._add(measured, checked)

    def _add(self, measured, checked) -> None:
        if measured is not None:
            deletion, insertion, road, saturated = measured
            self.deletion.append(deletion)
            self.insertion.append(insertion)
            self.road.append(road)
            self.saturated += saturated
        if checked is not None:
            self.threshold, final = checked
            self.final.append(final)

    def to_json(self, method: str, layer: str) -> dict:
        document: dict = {"method": method, "layer": layer}
        if layer == INPUT_LAYER:  # a map of the input's, measured as its relevance map
            document.update(resolution="input", reduction=REDUCTION)
        if self.deletion:
            document.update(
                images=len(self.deletion),
                deletion_auc=_mean(self.deletion),
                insertion_auc=_mean(self.insertion),
                road_combined=_mean(self.road),
                saturated=self.saturated,
            )
        if self.final:
            known = [value for value in self.final if value is not None]
            document["sanity"] = {
                "images": len(self.final),
                "explains_model": sum(1 for value in self.final if value is None or abs(value) <= self.threshold),
                "final_correlation_mean": _mean(known) if known else None,
            }
        return document


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


class TrustTally:
    """Adds up each image's ``LayerTrust`` per (method, layer); ``to_json`` ranks the maps by
    their mean deletion area, the faster the class goes the better."""

    def __init__(self, noun: str = "photo") -> None:
        self._sums: dict[tuple[str, str], _Sums] = {}
        self.noun = noun  # what the sentences call a sample: its kind's ``noun`` (``hookviz.samples``)

    def add(self, explanation) -> None:
        for layer in explanation.layers:
            trust = layer.trust
            if trust is None:
                continue
            for method, each in ((explanation.cam_method, trust), *trust.methods.items()):  # --cam a,b: every method's map
                if each.deletion is not None or each.sanity is not None:
                    self._sums.setdefault((method, layer.name), _Sums()).add(each)
        for method, pixels in explanation.pixel_maps.items():  # the input methods' relevance maps
            each = pixels.trust
            if each is not None and (each.deletion is not None or each.sanity is not None):
                self._sums.setdefault((method, INPUT_LAYER), _Sums()).add(each)

    def add_report(self, report) -> None:
        """An image's measures from its report.json (a ``records.Report``): one that
        ``--skip-existing`` skipped is ranked with the others, as a fresh run ranks it."""
        main = report.cam_methods[0] if report.cam_methods else None
        for layer in report.layers:
            trust = layer.trust
            if not trust:
                continue
            first = main or (layer.cam.method if layer.cam is not None else None)
            for method, each in ((first, trust), *(trust.get("methods") or {}).items()):
                if method and isinstance(each, dict) and (each.get("faithfulness") or each.get("sanity")):
                    self._sums.setdefault((method, layer.name), _Sums()).add_json(each)
        for method, pixels in report.pixel_maps.items():
            each = pixels.trust
            if each and (each.get("faithfulness") or each.get("sanity")):
                self._sums.setdefault((method, INPUT_LAYER), _Sums()).add_json(each)

    def to_json(self) -> dict | None:
        """``{"maps": [...], "summary": [sentences]}``, the best map first; ``None`` when
        nothing was measured."""
        if not self._sums:
            return None
        maps = [sums.to_json(method, layer) for (method, layer), sums in self._sums.items()]
        maps.sort(key=lambda entry: entry.get("deletion_auc", float("inf")))
        return {
            "ranking": "by mean deletion area, lowest (the class goes fastest) first",
            "maps": maps,
            "summary": _sentences(maps, self.noun),
        }


def _ranking(measured: list[dict], noun: str = "photo") -> str:
    """The faithfulness sentence over ``measured`` (ranked, best first): the map that deletes
    the class fastest, or why none is named (saturated probabilities, a tie)."""
    from hookviz.trust.deletion import SATURATED, TIE, distinct_digits

    best = measured[0]
    photos = f"this {noun}" if best["images"] == 1 else f"these {best['images']} {noun}s"
    if all(entry["saturated"] == entry["images"] for entry in measured):
        return (
            f"faithfulness: on {photos}, the target's probability is saturated: it stays at or above {SATURATED} "
            "until every pixel is deleted, so the deletion curves carry no information and no map is ranked"
        )
    tied = [entry for entry in measured if entry["deletion_auc"] - best["deletion_auc"] <= TIE]
    digits = distinct_digits([entry["deletion_auc"] for entry in measured[: len(tied) + 1]])
    numbers = (
        f"mean deletion area {best['deletion_auc']:.{digits}f}, insertion area {best['insertion_auc']:.3f}, "
        f"ROAD {best['road_combined']:+.3f}"
    )
    if best["saturated"]:
        numbers += f"; on {best['saturated']} of {best['images']} {noun}s the probability was saturated, its curve uninformative"
    if len(tied) > 1:
        names = [f"{entry['method']} at {entry['layer']}" for entry in tied]
        return (
            f"faithfulness: on {photos}, {', '.join(names[:-1])} and {names[-1]} tie ({numbers}): "
            "no map deletes the class faster, none is named"
        )
    where = f"{best['method']} at {best['layer']}"
    if len(measured) == 1:
        return f"faithfulness: on {photos}, {where} has {numbers} (no other map measured to rank it against)"
    runner_up = measured[1]
    return (
        f"faithfulness: on {photos}, {where} deletes the class fastest "
        f"({numbers}; next {runner_up['method']} at {runner_up['layer']}, {runner_up['deletion_auc']:.{digits}f})"
    )


def _sentences(maps: list[dict], noun: str = "photo") -> list[str]:
    measured = [entry for entry in maps if "deletion_auc" in entry]
    said = [_ranking(measured, noun)] if measured else []
    for entry in maps:
        sanity = entry.get("sanity")
        if sanity is None:
            continue
        failing = sanity["images"] - sanity["explains_model"]
        verdict = (
            f"its map changes with the model's weights on every {noun}"
            if not failing
            else f"its map barely changes with the model's weights on {failing} of {sanity['images']} {noun}s: "
            "there it shows the input, not the model"
        )
        said.append(f"randomisation check: {entry['method']} at {entry['layer']}: {verdict}")
    return said
