"""Models: where they come from (``sources``), how they load (``loading``), their checkpoints."""
