"""The asynchronous actor-learner (`use_async_actor_learner=true`): Ray actors that play
games with the newest weights they have (`worker.py`), the collector that feeds the
learner from them through a replay buffer with a staleness bound (`collector.py`,
`replay.py`), where actors sit on this machine's GPUs (`placement.py`), and the reaper that
takes a local Ray instance down however a run ends (`reaper.py`). Ray is an optional
extra: nothing here is imported unless the mode is on."""
