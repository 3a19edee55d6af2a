"""Vision-language model families: where each architecture puts its image tokens, the grid they
form, and its vision, projector and language layers (``base.VLM_FAMILIES``)."""
