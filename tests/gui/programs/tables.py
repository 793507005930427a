"""Imported by work.py: its import does real work, so the profile has Python's import-system
frames (<frozen importlib._bootstrap>) between work.py's import line and this module, which the
GUI hides by default."""

SQUARES = sorted(str(i * i) for i in range(300_000))
