"""One decode step of the embedded model (bf16, 16 rows after 256-token random prompts,
LoRA r16 merged in as the sampler runs it): transformers' forward (`ModelDecoder`) vs our
step (`PackedDecoder`), arms alternating step by step, median of 10 after 3 warm-ups
each; then the top operators of 5 profiled steps of ours and the profiled operator count
of both. Run from the repository root:

    python docs/results/engine-decode-step/decode_step_ab.py > docs/results/engine-decode-step/decode-step-ab.txt
"""

from __future__ import annotations

import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile

from spiral.engines.torch.decode import ModelDecoder, PackedDecoder, packed_weights
from spiral.engines.torch.learner import TorchLearner
from spiral.engines.loading import ModelConfig
from spiral.engines.torch.merged import merged
from spiral.engines.torch.prefill import prefill
from spiral.engines.torch.sampler import eval_mode
from spiral.engines.torch.snapshots import TRAINED

ROWS, PROMPT, STEPS = 16, 256, 10


def main() -> None:
    learner = TorchLearner(ModelConfig(model="embedded", lora_rank=16, seed=0, dtype="bfloat16"))
    model = learner.model
    gen = torch.Generator().manual_seed(0)
    prompts = [
        [int(t) for t in torch.randint(100, 20000, (PROMPT,), generator=gen)] for _ in range(ROWS)
    ]
    with merged(model, TRAINED), eval_mode(model):
        weights = packed_weights(model, TRAINED)
        assert weights is not None
        decoders = {}
        for name in ("model_forward", "packed"):
            pre = prefill(model, prompts, 0, 0, None, logits_to_keep=1)
            if name == "packed":
                decoders[name] = PackedDecoder(weights, pre, STEPS + 20)
            else:
                decoders[name] = ModelDecoder(model, pre, None)
        ids = pre.out.logits[:, -1].argmax(-1)
        times: dict[str, list[float]] = {name: [] for name in decoders}
        for step in range(STEPS + 3):
            for name, decoder in decoders.items():
                start = time.perf_counter()
                decoder.step(ids)
                if step >= 3:
                    times[name].append(time.perf_counter() - start)
        for name, values in times.items():
            print(f"{name}: median {1e3 * statistics.median(values):.1f} ms a step")
        counts = {}
        for name, decoder in decoders.items():
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                for _ in range(5):
                    decoder.step(ids)
            events = prof.key_averages()
            counts[name] = sum(e.count for e in events) / 5 / len(weights.layers)
            if name == "packed":
                print(events.table(sort_by="self_cpu_time_total", row_limit=12))
        for name, count in counts.items():
            print(f"{name}: {count:.0f} profiled operator calls a layer (nested ones included)")


if __name__ == "__main__":
    main()
