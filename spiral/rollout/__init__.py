"""rollout layer (see DESIGN.md)."""
