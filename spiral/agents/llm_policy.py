"""The language-model policy: renders each state's prompt, samples, parses the move.

`take_turns` is the hot path: all states of a wave go to the sampler in ONE batched call,
and each Turn keeps the exact prompt ids, sampled ids and sampler log-probs, so training
rows are built from those ids and text is never re-tokenised. A completion that does not
parse to a legal move yields a Turn whose `parse.failure` says why; the rollout then
applies the invalid-move policy. `act` (one state, for evaluation and human play) raises
`InvalidModelMove` instead, carrying the turn.

With `members=` the policy also plays frozen pool members (population play), each a LoRA
adapter of the same model: it is then a joint agent, bound to its own label and every
member's, and a wave's turns for all of them are one sampler call with per-row adapters.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import cast

from spiral.agents.base import Agent
from spiral.engines.base import AdapterSampler, Sampler, SamplingParams
from spiral.games.base import State
from spiral.prompts.parse import parse_move
from spiral.prompts.render import build_prompt, constraint_for, encode
from spiral.prompts.spec import PromptSpec
from spiral.types import Completion, Move, Turn


class InvalidModelMove(RuntimeError):
    """The model's answer was not a legal move (see `.turn.parse.failure`)."""

    def __init__(self, turn: Turn) -> None:
        failure = turn.parse.failure if turn.parse else None
        super().__init__(
            f"model move not legal ({failure}); text: {turn.completion and turn.completion.text!r}"
        )
        self.turn = turn


class LLMPolicy(Agent):
    """A model-backed agent over any Sampler (local torch, vLLM, Tinker)."""

    def __init__(
        self,
        sampler: Sampler,
        spec: PromptSpec,
        params: SamplingParams,
        name: str = "policy",
        seed: int = 0,
        spec_by_game: Mapping[str, PromptSpec] | None = None,
        members: Mapping[str, str] | None = None,
    ) -> None:
        self.sampler = sampler
        self.members = dict(members or {})  # seat label -> LoRA adapter it samples from
        self.joint = bool(self.members)
        self.spec = spec
        self.spec_by_game = dict(spec_by_game or {})
        self.params = params
        self.name = name
        self._calls = seed

    @property
    def version(self) -> int:
        return int(getattr(self.sampler, "version", 0))

    def spec_for(self, state: State) -> PromptSpec:
        """Per-game overrides (e.g. observation style per env), else the run's spec."""
        return self.spec_by_game.get(state.game_id, self.spec)

    def prompts(self, states: Sequence[State]) -> tuple[list[str], list[list[int]]]:
        tokenizer = self.sampler.tokenizer
        texts = [build_prompt(s, s.current_player(), self.spec_for(s), tokenizer) for s in states]
        # Self-play repeats prompts (single-hand Kuhn: 12 distinct in a wave of 768), and
        # tokenizing each copy was ~15% of a make-train sampling step: once per text.
        ids_of = {t: encode(t, tokenizer) for t in dict.fromkeys(texts)}
        return texts, [list(ids_of[t]) for t in texts]

    def take_turns(self, states: Sequence[State], seed: int) -> list[Turn]:
        return self.take_turns_as([self.name] * len(states), states, seed)

    def take_turns_as(
        self, labels: Sequence[str], states: Sequence[State], seed: int
    ) -> list[Turn]:
        if not states:
            return []
        tokenizer = self.sampler.tokenizer
        _, prompt_ids = self.prompts(states)
        constraints = None
        if self.spec.answer_format == "constrained":
            constraints = [constraint_for(s, self.spec_for(s), tokenizer) for s in states]
        params = dataclasses.replace(self.params, seed=seed)
        if all(label == self.name for label in labels):
            completions = self.sampler.sample(prompt_ids, params, constraints)
        else:
            unknown = sorted(set(labels) - {self.name, *self.members})
            if unknown:
                raise KeyError(f"policy {self.name!r} does not play seat label {unknown[0]!r}")
            adapters = [self.members.get(label) for label in labels]
            sampler = cast(AdapterSampler, self.sampler)
            completions = sampler.sample(prompt_ids, params, constraints, adapters=adapters)
        turns = []
        for label, state, ids, completion in zip(
            labels, states, prompt_ids, completions, strict=True
        ):
            seat = state.current_player()
            spec = self.spec_for(state)
            truncated = completion.stop_reason == "length"
            parse = parse_move(self._answer_text(completion), state, spec, truncated=truncated)
            turns.append(
                Turn(
                    game_id=state.game_id,
                    seat=seat,
                    agent=label,
                    observation=state.observation(seat, spec.obs_style),
                    prompt_ids=tuple(ids),
                    completion=completion,
                    parse=parse,
                    policy_version=self.version if label == self.name else -1,
                )
            )
        return turns

    def _answer_text(self, completion: Completion) -> str:
        """The text the parser sees: the whole completion, or in constrained mode the
        answer span after the forced marker (decoded without special tokens)."""
        if completion.answer_start is None:
            return completion.text
        answer_ids = list(completion.tokens[completion.answer_start :])
        return str(self.sampler.tokenizer.decode(answer_ids, skip_special_tokens=True))

    def act(self, state: State) -> Move:
        self._calls += 1
        turn = self.take_turns([state], seed=self._calls)[0]
        if turn.move is None:
            raise InvalidModelMove(turn)
        return turn.move
