"""How the built-in tasks other than ``classify`` are shown (``hookviz.render.presentation``),
one module per task: ``segment`` (its mask and the classes' shares of pixels), ``detect`` (its
boxes) and ``embed`` (the similarity to each reference). ``classify`` is shown as every class
task is, by ``ClassPresentation``. The registry imports these modules on first use."""
