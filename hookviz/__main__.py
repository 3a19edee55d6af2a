from .cli import main

# Guarded: rendering workers are spawned processes, which import this module again.
if __name__ == "__main__":
    main()
