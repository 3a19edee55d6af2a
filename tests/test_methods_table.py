"""docs/methods.md's table of every method ("Every method at a glance") lists each of
hookviz's own methods once, with every column filled: issue 31 asks for one table that gives
each method's family, cost, reference, closeness and sanity result."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "methods.md"


def _table_rows() -> list[list[str]]:
    section = DOC.read_text(encoding="utf-8").split("## Every method at a glance", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `") and not line.startswith("| `--cam`")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]


def test_the_table_lists_every_method_of_hookviz_once_with_every_column_filled():
    from hookviz.methods import METHODS

    ours = [name for name in METHODS.names() if METHODS.get(name).function.__module__.startswith("hookviz.")]
    rows = _table_rows()
    listed = [re.fullmatch(r"`([^`]+)`", row[0]).group(1) for row in rows]
    assert sorted(listed) == sorted(ours), (set(ours) - set(listed), set(listed) - set(ours))
    assert len(listed) == len(set(listed))
    assert all(len(row) == 6 and all(row) for row in rows), [row for row in rows if len(row) != 6 or not all(row)]
