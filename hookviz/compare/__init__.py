"""Compare: a run against a baseline, the measures of change, and the CI checks."""
