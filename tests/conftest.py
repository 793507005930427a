"""Test-suite root: pytest puts this folder on sys.path for its conftest, so every test folder
imports the shared helpers (program_helpers.py) by name."""
