"""train layer: in what order? The config (`train_config.py`, `config.py`,
`config_groups.py`, `recipes/`), the step both loops share (`step.py`), the sync loop
(`loop.py`), what the loop does with the weights beyond learning (`averaging.py`,
`magnet.py`), population play (`population.py`), the async actor-learner (`actors/`),
torchrun (`data_parallel.py`), full width (`full_width.py`), checkpoints, resume and
stopping (`checkpoint.py`, `resume.py`, `stopping.py`, `run_lock.py`), the starting
weights' check (`weights_check.py`), exports and model cards, and the commands
`spiral train`, `spiral export` and `spiral seeds`."""
