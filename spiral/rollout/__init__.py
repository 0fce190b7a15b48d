"""rollout layer: play many games at once (docs/architecture.md, "Rollout")."""
