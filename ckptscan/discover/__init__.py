"""Stage 1, discover: a run folder -> its checkpoints ordered by step (``checkpoints.py``), the
training frameworks' output trees it recognises (``frameworks.py``)."""
