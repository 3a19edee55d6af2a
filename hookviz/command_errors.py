"""The one place where hookviz's errors become a command's one line and exit code.

0 every sample done, 1 some failed (or any other error), 2 usage error; 3 (a ``--fail-on``
check failed) and 130 (interrupted) are a run's own outcomes, set where the run ends.
``guard`` runs a command's step and turns a ``HookvizError`` (or any other exception, unless
``--debug``) into ``hookviz: error: ...`` on stderr and its exit code.
"""

from __future__ import annotations

import typer

from hookviz.errors import HookvizError, command_line_spelling, describe, hint
from hookviz.progress import stdout_closed

__all__ = ["exit_code_for", "fail", "guard"]


def fail(message: str, code: int) -> None:
    typer.echo(f"hookviz: error: {message}", err=True)
    raise typer.Exit(code)


def exit_code_for(error: BaseException) -> int:
    """The one place errors become exit codes: 2 usage, 1 anything else (3 and 130 are a
    run's own outcomes, set where the run ends)."""
    if isinstance(error, HookvizError):
        return error.exit_code
    return 1


def guard(debug: bool, action):
    """Run ``action``; turn hookviz's errors into one line (naming command-line flags) and an exit code."""
    with command_line_spelling():
        try:
            return action()
        except typer.Exit:
            raise
        except BrokenPipeError:
            stdout_closed()
            raise typer.Exit(0) from None
        except HookvizError as error:
            if debug:
                raise
            fail(str(error), exit_code_for(error))
        except Exception as error:  # a bug or a foreign model's failure: one line, unless --debug
            if debug:
                raise
            fail(f"{describe(error)}{hint('debug')}", 1)
