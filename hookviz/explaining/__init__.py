"""Explaining: the explainer, the forward and backward pass, the recording hooks and what a pass yields."""
