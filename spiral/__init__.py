"""Spiral: self-play reinforcement learning for language models on zero-sum text games."""

__version__ = "0.1.0"
