"""``python -m hookviz`` and the installed ``hookviz`` command (``hookviz.__main__:console_main``).

Ctrl-C and SIGTERM are taken in hand first, before typer and torch are imported (see
``interrupts``); then ``cli.console_main`` runs the command.
"""

import os

from hookviz.interrupts import Interrupted, catch_signals, interrupted_line


def console_main() -> None:
    catch_signals()
    try:
        from hookviz.cli import console_main as command
    except Interrupted:
        os.write(2, f"{interrupted_line()}\n".encode())
        os._exit(130)
    command()


# Guarded: rendering workers are spawned processes, which import this module again.
if __name__ == "__main__":
    console_main()
