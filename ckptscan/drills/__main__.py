from .cli import drill

drill()
