"""Anatomy: a model's layers, and how each layer's tensors lie (layouts, data flow, declared geometry)."""
