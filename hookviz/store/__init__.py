"""Store: a run's files, written atomically, their typed records, and a finished run read back."""
