"""The version of byoc (kept apart so that any layer can read it without importing the API)."""

__version__ = "0.2.0"
