"""The learner (`ab_learner.py`: embedded model, bf16, LoRA r32, no prefix sharing) eager,
then with every decoder layer compiled (`torch.compile(dynamic=True)`, inductor on this
CPU): seconds per call (the first compiled call includes compiling) and the relative
difference of the two gradients. Run from the repository root:

    PYTHONPATH=docs/results/engine-ceilings python docs/results/engine-ceilings/learn_compile_ab.py \
        > docs/results/engine-ceilings/learn-compile-ab.txt
"""

from __future__ import annotations

from ab_learner import learner_and_datums, relative, timed_call


def main() -> None:
    learner, datums = learner_and_datums()
    learner.share_prefix = False
    eager = [timed_call(learner, datums) for _ in range(3)]
    print("eager s:", [round(s, 2) for s, _ in eager], flush=True)
    for layer in learner.model.get_base_model().model.layers:
        layer.compile(dynamic=True)
    compiled = [timed_call(learner, datums) for _ in range(4)]
    print("compiled s (first includes compiling):", [round(s, 2) for s, _ in compiled])
    print(f"gradient, compiled vs eager: {relative(eager[-1][1], compiled[-1][1]):.4f} relative")
    print(f"gradient, eager vs eager: {relative(eager[-1][1], eager[-2][1]):.4f} relative")


if __name__ == "__main__":
    main()
