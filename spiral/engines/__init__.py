"""engines layer (see DESIGN.md)."""
