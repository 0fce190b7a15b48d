"""prompts layer (see DESIGN.md)."""
