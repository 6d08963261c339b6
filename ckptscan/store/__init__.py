"""The result store: per-checkpoint part files and the assembled HDF5 timeline (``timeline.py``)."""
