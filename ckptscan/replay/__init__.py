"""Replay-activation files: the file contract and its reader (``contract.py``), the read-through check
in a worker process (``check.py``).  The recorder training loops call is ``ckptscan.record``."""
