from .cli import console_main

# Guarded: rendering workers are spawned processes, which import this module again.
if __name__ == "__main__":
    console_main()
