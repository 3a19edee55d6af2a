"""mkdocs hook (``hooks:`` in mkdocs.yml): the command reference, rendered from the Typer app
while the site is built, so that it cannot drift from the command.

A page that holds the marker ``<!-- hookviz-commands -->`` gets, in its place, one section per
command: its usage line, its help text (the command's docstring) and a table of its arguments
and options with their help and defaults, under the panels ``hookviz COMMAND --help`` prints them in.
"""

from __future__ import annotations

import html
import inspect

MARKER = "<!-- hookviz-commands -->"


def on_page_markdown(markdown: str, page, config, files, **kwargs) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, command_reference())


def command_reference() -> str:
    """Markdown for ``hookviz`` and each of its commands, in the order ``--help`` lists them."""
    import click
    import typer.main

    from hookviz.cli import app

    group = typer.main.get_command(app)
    root = click.Context(group, info_name="hookviz")
    sections = [_section("hookviz", group, root)]
    for name in group.list_commands(root):
        command = group.get_command(root, name)
        sections.append(_section(f"hookviz {name}", command, click.Context(command, info_name=name, parent=root)))
    return "\n\n".join(sections) + "\n"


def _cell(text: str) -> str:
    return html.escape(" ".join(text.split()), quote=False).replace("|", "\\|")


def _section(title: str, command, context) -> str:
    lines = [f"## `{title}`", "", "```text", command.get_usage(context), "```", ""]
    if command.help:
        lines += ["```text", inspect.cleandoc(command.help), "```", ""]
    from hookviz.command_options import help_panels

    helps = command.get_help_option(context)  # the page lists what a command takes, not --help
    shown = helps.get_help_record(context) if helps else None
    panels = {
        panel: kept
        for panel, records in help_panels(command, context).items()
        if (kept := [record for record in records if record != shown])
    }
    for panel, records in panels.items():
        lines += [f"**{panel}**", ""] if len(panels) > 1 else []
        lines += ["| argument or option | meaning |", "| --- | --- |"]
        lines += [f"| `{names}` | {_cell(meaning)} |" for names, meaning in records]
        lines += [""]
    return "\n".join(lines).rstrip("\n")
