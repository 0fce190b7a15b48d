"""Sampling one make-train Kuhn step with prompts tokenized per copy (old) vs once per
distinct text (`LLMPolicy.prompts`); arms alternating, best of 3 after a
warm-up rep; asserts the same prompt ids. Run from the repository root:

    python docs/results/engine-decode-step/tokenize_once_ab.py
"""

from __future__ import annotations

import sys
import time
from typing import Any

sys.path.insert(0, "benchmarks")
from ab_setup import preset_learner  # noqa: E402

from spiral.agents import llm_policy  # noqa: E402
from spiral.prompts.render import build_prompt, encode  # noqa: E402
from spiral.train.loop import collect  # noqa: E402


def per_copy(self: Any, states: Any) -> tuple[list[str], list[list[int]]]:
    tok = self.sampler.tokenizer
    texts = [build_prompt(s, s.current_player(), self.spec_for(s), tok) for s in states]
    return texts, [encode(t, tok) for t in texts]


def main() -> None:
    args = type("Args", (), {"preset": "embedded-kuhn", "keys": []})()
    cfg, setup, learner, _ = preset_learner(args)
    arms = {"old": per_copy, "new": llm_policy.LLMPolicy.prompts}
    seconds: dict[str, list[float]] = {"old": [], "new": []}
    for rep in range(4):  # rep 0 warms up
        ids = {}
        for arm, prompts in arms.items():
            llm_policy.LLMPolicy.prompts = prompts  # type: ignore[method-assign]
            start = time.perf_counter()
            episodes, _ = collect(cfg, setup, learner, 1)
            if rep:
                seconds[arm].append(time.perf_counter() - start)
            ids[arm] = [t.prompt_ids for e in episodes for t in e.turns]
        assert ids["old"] == ids["new"]
    best = {arm: min(v) for arm, v in seconds.items()}
    print(seconds, "best old/new", round(best["old"] / best["new"], 3))


if __name__ == "__main__":
    main()
