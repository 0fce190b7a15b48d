"""evaluation layer (see DESIGN.md)."""
