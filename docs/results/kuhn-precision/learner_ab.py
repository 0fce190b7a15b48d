"""The in-process A/B of one make-train learner step (33 merged Kuhn rows,
10,297 tokens), run as `python learner_ab.py float32` and `... bfloat16` one after the
other on a quiet machine: bf16 6.6-7.4 s vs fp32 10.5-11.2 s per forward+backward."""

import sys, time, chz, torch
from spiral.algo.assemble import assemble
from spiral.algo.merge import merge_identical
from spiral.algo.rae import Baselines, rae_advantages
from spiral.algo.losses import importance_sampling_loss
from spiral.engines.torch.learner import Regularizer
from spiral.train.config import parse_config
from spiral.train.loop import POLICY, collect
from spiral.train.setup import build_setup, make_learner_factory

dt = sys.argv[1]
cfg = parse_config(["preset=embedded-kuhn", "log_path=/dev/null", f"dtype={dt}"])
setup = build_setup(cfg)
learner = make_learner_factory(cfg)()
learner.temperature = cfg.temperature
episodes, _ = collect(cfg, setup, learner, 0)
t = time.perf_counter()
collect(cfg, setup, learner, 1)
print(dt, "sample", round(time.perf_counter() - t, 2))
adv, _, _ = rae_advantages(episodes, Baselines({}), trained_agents={POLICY})
datums, _ = assemble(episodes, adv)
datums, _ = merge_identical(datums)
print("rows", len(datums), "tokens", sum(len(d.input_ids) for d in datums))
reg = Regularizer(0.3, 0.0, "snapshot", "reverse")
for i in range(2):
    t = time.perf_counter()
    learner.forward_backward(datums, importance_sampling_loss, reg)
    learner.model.zero_grad(set_to_none=True)
    print(dt, "fb", round(time.perf_counter() - t, 2))
