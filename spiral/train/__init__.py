"""train layer: config, the step, the loops, checkpoints (docs/architecture.md, "Train")."""
