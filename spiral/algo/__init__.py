"""algo layer (see DESIGN.md)."""
