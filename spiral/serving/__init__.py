"""Serving a checkpoint: `spiral serve`, an OpenAI-compatible chat endpoint (`server`)."""
