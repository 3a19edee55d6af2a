"""Inputs: the image files a run takes, how each is decoded and preprocessed, and how it is recognised later."""
