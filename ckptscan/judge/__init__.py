"""Judging a timeline: the training log (``logs.py``), baselines and alarms (``detect.py``), fault
classes (``classify.py``), and the verdict keys of summary.json (``verdict.py``)."""
