"""Concepts: what a layer's channels stand for, beyond one photo.

The atlas (``hookviz atlas``) keeps each channel's best examples; this stage adds what those
examples are read with: ``relevance`` (each channel's contribution to a class's score, CRP's
"RelMax"), ``glocal`` (the channels a prediction rested on, with their atlas examples),
``naming`` (CLIP-Dissect's names from a vocabulary) and ``visualize`` (an input optimised to
excite a channel, Lucid's). Each module stands alone and takes plain tensors and arrays.
"""
