"""An agent that plays through any OpenAI-compatible chat-completions endpoint.

`make_api_agent("gpt-4o-mini", base_url=..., ...)` (spec `api:MODEL`) returns an
`ApiAgent`: each turn becomes chat messages, one POST {base_url}/chat/completions, and the
reply is read with `spiral.prompts.parse_move`, exactly as for a local model.

Choices:
- Messages: an optional system message with the game's rules (`system_rules=True`), then
  one user message in the SPIRAL "game" wording (preamble, observation, the answer-format
  instruction). The chat markup is the server's business, so `template` is not used.
  The constrained format needs token-level control that an HTTP API does not give, so it
  is refused with a message naming the formats that work.
- httpx with explicit timeouts. A few attempts (`max_retries` + 1, default 4) with
  exponential backoff between them (`backoff_s * 2**k`: 0.5, 1, 2 s, capped at
  `max_backoff_s`, or the server's Retry-After when it sends a number) on connection
  errors, timeouts, 408, 429 and 5xx, so a blip costs seconds and a refused connection is
  known in about four (a host that never answers: four connect timeouts). Other 4xx (bad key, unknown model) are not retried: repeating them cannot
  help. A call that succeeds after retries counts like any other.
- A reply is a move: one that does not parse, or names an illegal move, is the API
  model's invalid move and loses it the game, like a local model's. No reply is not a
  move: a call that still fails raises `ApiCallError` (a SpiralError naming the agent,
  the URL, the attempts and the last error), which stops the evaluation or training run.
  Scoring it as the API side's invalid move would hand the other seat a win per game and
  report an outage as a win rate of 1.00. `stats()` counts calls, retries and failures;
  the last few errors of failed attempts are kept.
- The key is read from the environment variable `api_key_env` when the agent is built and
  sent only as a Bearer header; it is never stored in `repr`, errors or stats. No key (an
  unset variable) means no Authorization header, which local servers accept.
- States of one wave are sent one after another (no concurrency): simple, predictable
  rate use.
- `usage` is counted where the server reports it as numbers; a missing or malformed
  `usage` counts nothing (it is bookkeeping, not the move).
- Turns carry no token ids (`completion=None`): API turns are never training rows.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from spiral.agents.base import Agent
from spiral.agents.llm_policy import InvalidModelMove
from spiral.errors import AgentSpecError, SpiralError
from spiral.games.base import ObsStyle, State
from spiral.prompts.parse import parse_move
from spiral.prompts.spec import AnswerFormat, PromptSpec
from spiral.prompts.templates import GAME_PREAMBLE, instruction_for
from spiral.types import Move, Turn

DEFAULT_BASE_URL = "https://api.openai.com/v1"
RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
# Attempts and backoff: an endpoint that answers after a blip is waited for (0.5 + 1 + 2
# s at most between four attempts); one that stays down stops the command quickly.
MAX_RETRIES = 3
BACKOFF_S = 0.5
MAX_BACKOFF_S = 8.0
_KEEP_ERRORS = 5


class ApiCallError(SpiralError, RuntimeError):
    """A chat-completions call that got no reply (the endpoint stayed unreachable or
    refused the request): not a move, so the game cannot be scored; the message says
    which agent, where, and what to check."""


@dataclass(frozen=True)
class ApiSettings:
    """Where and how to call the endpoint. `api_key_env` names the variable holding the key."""

    model: str
    base_url: str = DEFAULT_BASE_URL
    api_key_env: str = "OPENAI_API_KEY"
    timeout_s: float = 30.0
    max_retries: int = MAX_RETRIES
    backoff_s: float = BACKOFF_S
    max_backoff_s: float = MAX_BACKOFF_S
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 1024

    def __post_init__(self) -> None:
        if not self.model:
            raise AgentSpecError("api agent needs a model name: use the spec api:MODEL")
        if self.max_retries < 0 or self.timeout_s <= 0 or self.backoff_s < 0:
            raise ValueError(
                f"need max_retries >= 0, timeout_s > 0, backoff_s >= 0; got {self.max_retries}, "
                f"{self.timeout_s}, {self.backoff_s}"
            )


def chat_messages(state: State, spec: PromptSpec) -> list[dict[str, str]]:
    """The chat messages the seat to move sees: optional rules, then observation + instruction."""
    seat = state.current_player()
    legal = state.legal_actions()
    observation = state.observation(seat, spec.obs_style)
    messages: list[dict[str, str]] = []
    if spec.system_rules:
        rules = state.rules_text(seat)
        messages.append({"role": "system", "content": rules})
        if rules and rules in observation:
            # Do not make the model read the rules twice.
            observation = observation.replace(rules, "", 1).strip("\n")
    instruction = instruction_for(spec.answer_format, legal[0], spec.think_budget)
    content = f"{GAME_PREAMBLE}\nObservation: {observation}\n{instruction}"
    messages.append({"role": "user", "content": content})
    return messages


class ApiAgent(Agent):
    """A model behind an OpenAI-compatible HTTP endpoint."""

    def __init__(
        self, settings: ApiSettings, spec: PromptSpec, name: str = "", seed: int = 0
    ) -> None:
        if spec.answer_format == "constrained":
            raise ValueError(
                "api agents cannot use answer_format='constrained' (an HTTP API gives no "
                "token-level control); use answer_format=bracket or boxed"
            )
        try:
            import httpx
        except ImportError as err:
            raise ImportError(
                "api:MODEL agents need httpx: pip install 'spiral-selfplay[api]'"
            ) from err

        self.settings = settings
        self.spec = spec
        self.name = name or f"api:{settings.model}"
        self._seed = seed
        self.calls = 0
        self.failures = 0
        self.retries = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.errors: list[str] = []
        key = os.environ.get(settings.api_key_env, "")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client = httpx.Client(
            base_url=settings.base_url.rstrip("/"),
            headers=headers,
            timeout=httpx.Timeout(settings.timeout_s, connect=min(10.0, settings.timeout_s)),
        )

    # ---- HTTP ----------------------------------------------------------------------
    def _delay(self, attempt: int, retry_after: str | None) -> float:
        if retry_after is not None:
            try:
                asked = float(retry_after)
            except ValueError:
                asked = math.nan  # an HTTP date, not seconds: our own backoff
            if math.isfinite(asked):  # a negative or absurd value is held to the range
                return min(max(asked, 0.0), self.settings.max_backoff_s)
        return min(self.settings.backoff_s * 2**attempt, self.settings.max_backoff_s)

    def complete(self, messages: list[dict[str, str]], seed: int | None = None) -> str:
        """The assistant's reply text; retries transient failures, raises ApiCallError."""
        import httpx

        s = self.settings
        body: dict[str, Any] = {
            "model": s.model,
            "messages": messages,
            "max_tokens": s.max_tokens,
            "temperature": s.temperature,
            "top_p": s.top_p,
            "n": 1,
        }
        if seed is not None:
            body["seed"] = seed
        for attempt in range(s.max_retries + 1):
            if attempt:
                self.retries += 1
            retry_after = None
            try:
                response = self._client.post("/chat/completions", json=body)
            except httpx.TransportError as err:  # connection refused, timeouts, resets
                self._note(f"{type(err).__name__}: {err}")
            else:
                if response.status_code == 200:
                    return self._read_reply(response)
                self._note(f"HTTP {response.status_code}: {response.text[:200]}")
                if response.status_code not in RETRY_STATUS:
                    raise ApiCallError(self._refused())
                retry_after = response.headers.get("retry-after")
            if attempt < s.max_retries:
                time.sleep(self._delay(attempt, retry_after))
        raise ApiCallError(self._unanswered(s.max_retries + 1))

    def _note(self, error: str) -> None:
        self.errors = [*self.errors, error][-_KEEP_ERRORS:]

    def _unanswered(self, attempts: int) -> str:
        return (
            f"the API opponent {self.name} at {self.settings.base_url} did not answer after "
            f"{attempts} attempt(s): {self.errors[-1]}; check api_base_url and that the "
            "server is up and reachable from here, then run the command again"
        )

    def _refused(self) -> str:
        return (
            f"the API opponent {self.name} at {self.settings.base_url} refused the request: "
            f"{self.errors[-1]}; check the model name ({self.settings.model}), the key "
            f"(api_key_env={self.settings.api_key_env}) and api_base_url"
        )

    def _read_reply(self, response: Any) -> str:
        try:
            data = response.json()
            content = data["choices"][0]["message"]["content"]
            if not isinstance(content, str):  # null (a refusal, a tool call): no move
                raise TypeError(f"the message content is {content!r}, not text")
        except (ValueError, KeyError, IndexError, TypeError) as err:
            self._note(f"not a chat-completions reply ({err!r}): {response.text[:200]}")
            raise ApiCallError(
                f"the API opponent {self.name} at {self.settings.base_url} answered with "
                f"{self.errors[-1]}; check that api_base_url is an OpenAI-compatible /v1 "
                "endpoint"
            ) from err
        usage = data.get("usage") if isinstance(data, dict) else None
        self.prompt_tokens += _count(usage, "prompt_tokens")
        self.completion_tokens += _count(usage, "completion_tokens")
        return content

    # ---- Agent ---------------------------------------------------------------------
    def _turn(self, state: State, seed: int) -> Turn:
        seat = state.current_player()
        self.calls += 1
        try:
            text = self.complete(chat_messages(state, self.spec), seed=seed)
        except ApiCallError:
            self.failures += 1
            raise
        return Turn(
            game_id=state.game_id,
            seat=seat,
            agent=self.name,
            observation=state.observation(seat, self.spec.obs_style),
            parse=parse_move(text, state, self.spec),
        )

    def take_turns(self, states: Sequence[State], seed: int) -> list[Turn]:
        # One request per state; each gets its own seed so replies can differ across games.
        return [self._turn(s, (seed + i) % (1 << 31)) for i, s in enumerate(states)]

    def act(self, state: State) -> Move:
        self._seed += 1
        turn = self._turn(state, self._seed)
        if turn.move is None:
            raise InvalidModelMove(turn)
        return turn.move

    def stats(self) -> dict[str, Any]:
        """Call counts for reports: `retries` are failed attempts that were tried again,
        `failures` calls that got no reply (each stopped the command)."""
        return {
            "calls": self.calls,
            "failures": self.failures,
            "retries": self.retries,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "last_errors": list(self.errors),
        }

    def close(self) -> None:
        self._client.close()

    def __repr__(self) -> str:
        return f"ApiAgent(model={self.settings.model!r}, base_url={self.settings.base_url!r})"


def make_api_agent(
    arg: str,
    game_id: str = "",
    seed: int = 0,
    base_url: str = DEFAULT_BASE_URL,
    api_key_env: str = "OPENAI_API_KEY",
    timeout_s: float = 30.0,
    max_retries: int = MAX_RETRIES,
    backoff_s: float = BACKOFF_S,
    temperature: float = 1.0,
    top_p: float = 1.0,
    max_tokens: int = 1024,
    answer_format: AnswerFormat = "bracket",
    system_rules: bool = False,
    obs_style: ObsStyle | None = None,
    name: str = "",
) -> ApiAgent:
    """Factory for the `api:MODEL` spec. `game_id` is unused (one agent plays any game)."""
    settings = ApiSettings(
        model=arg,
        base_url=base_url,
        api_key_env=api_key_env,
        timeout_s=float(timeout_s),
        max_retries=int(max_retries),
        backoff_s=float(backoff_s),
        temperature=float(temperature),
        top_p=float(top_p),
        max_tokens=int(max_tokens),
    )
    spec = PromptSpec(
        template="plain",
        answer_format=answer_format,
        system_rules=bool(system_rules),
        obs_style=obs_style,
    )
    return ApiAgent(settings, spec, name=name, seed=seed)


def _count(usage: Any, key: str) -> int:
    """A token count from a reply's `usage`, 0 where it is missing or not a finite number."""
    value = usage.get(key) if isinstance(usage, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return int(value) if math.isfinite(value) and 0 <= value < 2**63 else 0
