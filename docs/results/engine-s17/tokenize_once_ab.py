"""Sampling one make-train Kuhn step with prompts tokenized per copy (old) vs once per
distinct text (LLMPolicy.prompts, session 17); arms alternating, best of 3; asserts the
same prompt ids. Run from the repository root."""

import sys, time

sys.argv = ["x"]
sys.path.insert(0, "benchmarks")
from ab_setup import ab_args, preset_learner
from spiral.train.loop import collect
from spiral.agents import llm_policy as lp
from spiral.prompts.render import build_prompt, encode

args = ab_args("x", "embedded-kuhn", 1)
cfg, setup, learner, _ = preset_learner(args)
new = lp.LLMPolicy.prompts


def old(self, states):
    tok = self.sampler.tokenizer
    texts = [build_prompt(s, s.current_player(), self.spec_for(s), tok) for s in states]
    return texts, [encode(t, tok) for t in texts]


res = {"old": [], "new": []}
toks = {}
for rep in range(4):
    for arm, fn in (("old", old), ("new", new)):
        lp.LLMPolicy.prompts = fn
        t = time.perf_counter()
        eps, _ = collect(cfg, setup, learner, 1)
        dt = time.perf_counter() - t
        toks[arm] = [tt.prompt_ids for e in eps for tt in e.turns]
        if rep:
            res[arm].append(dt)
    assert toks["old"] == toks["new"]
print(
    {k: [round(x, 2) for x in v] for k, v in res.items()},
    "best old/new",
    round(min(res["old"]) / min(res["new"]), 3),
)
