"""mkdocs hook (``hooks:`` in mkdocs.yml): the command reference, rendered from the Typer app
while the site is built, so that it cannot drift from the command.

A page that holds the marker ``<!-- hookviz-commands -->`` gets, in its place, one section per
command: its usage line, its help text (the command's docstring) and a table of its arguments
and options with their help and defaults, as ``hookviz COMMAND --help`` prints them.
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
    records = [record for param in command.params if (record := param.get_help_record(context))]
    if records:
        lines += ["| argument or option | meaning |", "| --- | --- |"]
        lines += [f"| `{names}` | {_cell(meaning)} |" for names, meaning in records]
    return "\n".join(lines)
