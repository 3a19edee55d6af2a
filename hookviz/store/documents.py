"""What ``report.json`` and ``run.json`` share: the schema each names and its version, the
forgiving readers of their values, and reading one from its file (see ``records``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from hookviz.errors import SchemaError, display_path

__all__ = [
    "REPORT_SCHEMA",
    "RUN_SCHEMA",
    "SCHEMA_KEY",
    "schema_path",
    "schema_version",
    "read_document",
    "read_text",
    "read_texts",
    "read_mapping",
    "read_int",
    "read_number",
    "read_shape",
    "read_list",
]

#: The schema of the files this hookviz writes.
REPORT_SCHEMA = "hookviz/report/3"
RUN_SCHEMA = "hookviz/run/1"
SCHEMA_KEY = "schema"
_NAMED = re.compile(r"^hookviz/(\w+)/(\d+)$")


def schema_path(kind: str) -> Path:
    """The published JSON Schema of ``kind``, shipped with the package: ``report``, ``run``, or
    ``diff`` (``diff.json``, whose records are ``compare.measures.RunDiff``'s and whose version is its ``format``)."""
    return Path(__file__).parent.parent / "schemas" / f"{kind}.schema.json"  # hookviz/schemas/


def schema_version(document: dict, current: str, source) -> int | None:
    """The schema version ``document`` was written in: 0 without one (an older hookviz's),
    ``None`` for another kind of file.

    Raises:
        SchemaError: a newer version than ``current``, or a schema this hookviz does not know.
    """
    named = document.get(SCHEMA_KEY)
    if named is None:
        return 0
    kind = current.split("/")[1]
    match = _NAMED.match(named) if isinstance(named, str) else None
    if match is not None and match.group(1) != kind:
        return None
    known = int(current.rsplit("/", 1)[1])
    if match is None or int(match.group(2)) > known:
        raise SchemaError(
            f"{display_path(source)}: written by a newer hookviz (schema {named!r}; this one reads {current} "
            "and older); upgrade hookviz to read it"
        )
    return int(match.group(2))


# ----------------------------------------------------------------------------- forgiving readers


def read_text(value) -> str | None:
    return value if isinstance(value, str) else None


def read_texts(value) -> tuple[str, ...]:
    return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list) else ()


def read_mapping(value) -> dict:
    return value if isinstance(value, dict) else {}


def read_int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def read_number(value) -> float | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def read_shape(value) -> tuple[int, ...] | None:
    return tuple(value) if isinstance(value, list) else None


def read_list(value) -> list | None:
    return list(value) if value is not None else None


def read_document(path: Path, record):
    """``record.from_json`` of the JSON file at ``path``, or ``None`` when it cannot be read as JSON."""
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record.from_json(document, path)
