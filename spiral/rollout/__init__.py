"""rollout layer: play many games at once (`play.py`), for training and evaluation
alike; `state_keys.py` replays a finished game to name the state each turn was taken in."""
