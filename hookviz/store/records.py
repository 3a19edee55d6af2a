"""Records: the files other programs read, ``report.json`` and ``run.json``, as typed records.

Only ``report_records`` (``report.json``) and ``run_records`` (``run.json``) know their keys;
``documents`` holds what the two share, and this module gathers their names. Each record is
a frozen dataclass with ``to_json`` (the document written) and ``from_json`` (a document read back, as forgiving as a file
that an older hookviz wrote, or a person edited, needs). Values whose class elsewhere owns
their JSON (``SampleIdentity``, ``Layout``) are read back as those classes; the few that
only their writer interprets (the preprocessing, a task's prediction details, statistics)
stay JSON values.

Each file names its schema: ``"schema": "hookviz/report/3"`` or ``"hookviz/run/1"``. A
file without one was written before hookviz kept it (version 0) and is read as it always
was; one of a newer version than this hookviz knows is refused with one line
(``SchemaError``). The schemas are published as JSON Schema in ``hookviz/schemas/``
(``schema_path``); the tests check every file a run writes against them.
"""

from hookviz.store.documents import REPORT_SCHEMA, RUN_SCHEMA, schema_path
from hookviz.store.report_records import Asked, CamRecord, FrameFigures, LayerRecord, MapRecord, Report, Score, read_report
from hookviz.store.run_records import Checks, Counts, DiffEntry, ImageStatus, RunRecord, read_run

__all__ = [
    "REPORT_SCHEMA",
    "RUN_SCHEMA",
    "Score",
    "FrameFigures",
    "CamRecord",
    "MapRecord",
    "LayerRecord",
    "Asked",
    "Report",
    "ImageStatus",
    "Counts",
    "Checks",
    "DiffEntry",
    "RunRecord",
    "read_report",
    "read_run",
    "schema_path",
]
