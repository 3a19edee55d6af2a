"""The explorer in a notebook: a run folder's ``index.html`` as one ``<iframe srcdoc>``, the same
view (list, filters, routes, keyboard), offline and with no server.

The page and its data travel inline in the notebook's output: the sample table
(``explorer-data.js``), the atlas's channels, and each sample's details while they stay under
``inline_limit`` bytes (a notebook keeps every byte of its outputs; past it they load from the run
folder as the page itself loads them). The pictures stay files: the view asks for them at
``base``, the run folder as the notebook's page reaches it: by default its path relative to the
working folder (a notebook's kernel starts in the notebook's folder, and an ``srcdoc`` frame
resolves relative addresses as the notebook's own page does), else its ``file://`` address.

``hookviz.run(...)`` returns a ``RunSummary`` that shows itself this way as a cell's last line;
``hookviz.show_run(folder)`` shows a run folder made earlier.
"""

from __future__ import annotations

import html
import os
from dataclasses import dataclass
from pathlib import Path

from hookviz.errors import UsageError, arg
from hookviz.runs.explorer import ATLAS_DATA, DATA, DATA_TAG

__all__ = ["INLINE_LIMIT", "ExplorerView", "explorer_html", "show_run"]

#: Bytes of samples' details carried in the notebook at most (the table and the atlas always are).
INLINE_LIMIT = 2_000_000


@dataclass(frozen=True)
class ExplorerView:
    """A run folder's explorer, as a notebook cell's output shows it (``_repr_html_``).

    Attributes:
        folder: the run folder (its ``index.html`` and ``explorer-data.js``).
        base: where the notebook's page reaches the run folder's files; by default its path
            relative to the working folder (else its ``file://`` address).
        height: the frame's height in pixels.
        inline_limit: the samples' details carried inline while they stay under these bytes.
    """

    folder: Path
    base: str | None = None
    height: int = 640
    inline_limit: int = INLINE_LIMIT

    def _repr_html_(self) -> str:
        return explorer_html(self.folder, base=self.base, height=self.height, inline_limit=self.inline_limit)


def show_run(folder, base: str | None = None, height: int = 640) -> ExplorerView:
    """The explorer of the run in ``folder`` (``hookviz run --out``), to show in a notebook.

    Raises:
        UsageError: ``folder`` holds no explorer (no ``index.html`` and ``explorer-data.js``).
    """
    path = Path(folder)
    if not ((path / "index.html").is_file() and (path / DATA).is_file()):
        raise UsageError(
            f"{arg('folder', folder)}: holds no run's explorer (index.html, {DATA}); give a hookviz run --out folder"
        )
    return ExplorerView(path, base, height)


def explorer_html(folder: Path, *, base: str | None = None, height: int = 640, inline_limit: int = INLINE_LIMIT) -> str:
    """``folder``'s explorer as one ``<iframe srcdoc>``: its page, with its data inline."""
    folder = Path(folder)
    page = (folder / "index.html").read_text(encoding="utf-8")
    where = _base(folder) if base is None else base
    scripts = [f"window.HOOKVIZ_BASE={_js_string(where.rstrip('/') + '/')};", _data(folder / DATA)]
    if (folder / ATLAS_DATA).is_file():
        scripts.append(_data(folder / ATLAS_DATA))
    carried = 0
    for k in range(len(list(folder.glob("explorer-samples-*.js")))):
        chunk = folder / f"explorer-samples-{k}.js"
        carried += chunk.stat().st_size if chunk.is_file() else inline_limit + 1
        if carried > inline_limit:
            break  # the rest loads from ``base`` when a sample is opened
        scripts.append(_data(chunk))
    inline = "".join(f"<script>{script}</script>\n" for script in scripts)
    document = page.replace(DATA_TAG, inline, 1)
    return (
        f'<iframe class="hookviz-explorer" title="hookviz explorer: {html.escape(str(folder))}" '
        f'style="width:100%;height:{int(height)}px;border:1px solid #ccc" srcdoc="{html.escape(document, quote=True)}"></iframe>'
    )


def _data(path: Path) -> str:
    """A data file's text: ASCII JavaScript whose ``</`` are escaped (``explorer._script``), safe inline."""
    return path.read_text(encoding="ascii")


def _js_string(text: str) -> str:
    import json

    return json.dumps(text, ensure_ascii=True).replace("</", "<\\/")


def _base(folder: Path) -> str:
    """The run folder relative to the working folder when it lies within it, else its ``file://`` address."""
    try:
        relative = Path(os.path.relpath(folder.resolve(), Path.cwd().resolve()))
    except ValueError:  # another drive
        return folder.resolve().as_uri()
    if relative.parts and relative.parts[0] == "..":
        return folder.resolve().as_uri()
    return relative.as_posix()
