"""The analysis loop that runs the weight- and activation-side monitors over every checkpoint:
``analyzer.py`` (per checkpoint, per block, resumable), ``activations.py`` (the replay side of one
checkpoint), ``checkpoint_info.py`` (``ckptscan inspect``: what the loop would see in one checkpoint)."""
