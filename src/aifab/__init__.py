"""aifab: an AI training platform from raw data to served, watched models."""

__version__ = "0.1.0"
