"""Vision-language models (LLaVA, Qwen2-VL, PaliGemma, Idefics3): for each token a model writes
about a photo, where in the photo it looked. ``families`` declares each architecture's image
tokens and grids, ``conversation`` turns a prompt into the model's inputs and an answer,
``scoring`` gives every answer token's logit or log-probability in one teacher-forced pass."""
