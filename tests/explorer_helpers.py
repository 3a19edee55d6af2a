"""What a run's explorer (index.html and its data files) holds, read back for tests."""

from __future__ import annotations

import csv
import json
from pathlib import Path


def explorer_samples(out: Path) -> dict[str, dict | None]:
    """Each listed sample's details (``explorer-samples-K.js``), by folder name, in the list's order."""
    names = [row["name"] for row in explorer_rows(out)]
    details: list = []
    for k in range(len(list(out.glob("explorer-samples-*.js")))):
        text = (out / f"explorer-samples-{k}.js").read_text(encoding="ascii")
        details += json.loads(text[text.index("]=") + 2 :].rstrip().rstrip(";"))
    return dict(zip(names, details, strict=True))


def explorer_rows(out: Path) -> list[dict]:
    """``samples.csv``'s rows, in the list's order."""
    with open(out / "samples.csv", encoding="utf-8", newline="") as stream:
        return list(csv.DictReader(stream))


def explorer_pictures(out: Path) -> dict[str, str]:
    """Every picture the explorer shows, ``FOLDER/FILE`` -> what it is (its caption)."""
    found = {}
    for name, details in explorer_samples(out).items():
        if details is None:
            continue
        if details["clip"]:
            found[f"{name}/{details['clip']}"] = "animation"
        found.update({f"{name}/{file}": alt for file, alt in details["photos"]})
        for layer in details["layers"]:
            found.update({f"{name}/{file}": label for label, file in layer["pictures"]})
        for _, file in (details.get("change") or {}).get("layers", []):
            found[f"{name}/{file}"] = "change"
    return found


def explorer_text(out: Path) -> str:
    """The page and its data, as text (the heading, the table, every sample's details)."""
    parts = [(out / "index.html").read_text(encoding="utf-8"), (out / "samples.csv").read_text(encoding="utf-8")]
    parts += [json.dumps(d, ensure_ascii=False) for d in explorer_samples(out).values()]
    return "\n".join(parts)
