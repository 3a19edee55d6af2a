"""Runs: one process over many images (loader, render pool, batches)."""
