"""A rated league for population play: one skill rating per player, from 1v1 games.

    league = record(League(), episodes)     # a new League; the old one is unchanged
    print(table(league)); print(win_matrix(league))
    write_league(run_dir / "eval" / "league.json", league)

Each player (a checkpoint, the current policy, a scripted opponent: any seat label of an
`Episode`) has a `Rating(mu, sigma)`: mu is the skill estimate, sigma its uncertainty,
and `ordinal` = mu - 3 sigma a conservative score to sort by (a player with few games
ranks below one with the same mu and many games). A head-to-head record counts each
pair's wins, draws and losses beside the ratings.

Choices:
- **openskill**, not a hand-written Elo: it is maintained, and it keeps an uncertainty per
  player, so a checkpoint that joined late (few games) says so instead of pretending to
  be as well measured as the rest. Its Weng-Lin update is closed form (no iteration), so
  replaying the same games in the same order gives the same ratings bit for bit.
- **PlackettLuce with its defaults**: mu 25, sigma 25/3 (so a new player's ordinal is 0),
  beta 25/6, tau 25/300 (sigma grows a little before every game, so a player can keep
  moving). A name not yet rated starts at the default rating.
- **Game by game, in the order given**: each game is a 1v1 match ranked by the two seats'
  returns; equal returns are a tie (a draw, a truncated game, an invalid move under a
  policy that pays both seats the same). The head-to-head record uses the same rule, so
  its wins, draws and losses are exactly what the ratings saw. The order matters (a
  sequential rating does), which is why `play_round_robin` plays round by round.
- **Self-play is skipped**: a game whose two seats carry the same label teaches the rating
  nothing (the player beat itself), and is not counted anywhere.
- **The current policy is one name** (e.g. "policy"): its rating moves as it trains, as a
  rated player improving over a season would; frozen checkpoints keep their own names
  ("ckpt:step_000040"), so the league shows the policy climbing past its own past selves.
- **A value, not a service**: a frozen League goes in, a new one comes out; `to_json` /
  `from_json` round-trip exactly (JSON writes floats with repr, which reads back to the
  same float), so a resumed run rates the next games exactly as an uninterrupted one.
  `write_league` replaces league.json atomically (temp file, then os.replace), so a
  reader never sees half a file.
- **In evaluation, not analysis**: it plays its own games (`play_round_robin`, through
  agents and the rollout), which spiral/analysis/ may not import; population play rates
  its pool with it.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from openskill.models import PlackettLuce

from spiral.agents.base import Agent
from spiral.evaluation.intervals import Rate
from spiral.prompts.invalid import InvalidMovePolicy
from spiral.rollout.play import GameSpec, derive_seed, play_games
from spiral.types import Episode

MODEL = "PlackettLuce"
DEFAULT_MU = 25.0
DEFAULT_SIGMA = 25.0 / 3.0
DASH = "—"

Pair = tuple[str, str]  # (name_a, name_b) with name_a < name_b
Record = tuple[int, int, int]  # (wins of a, draws, losses of a)


@dataclass(frozen=True)
class Rating:
    """A player's skill estimate `mu` and its uncertainty `sigma`."""

    mu: float = DEFAULT_MU
    sigma: float = DEFAULT_SIGMA

    @property
    def ordinal(self) -> float:
        """mu - 3 sigma: what the player is almost surely at least as good as."""
        return self.mu - 3.0 * self.sigma


def pair_key(a: str, b: str) -> Pair:
    """The canonical (sorted) order a pair is stored under."""
    return (a, b) if a <= b else (b, a)


@dataclass(frozen=True)
class League:
    """Ratings by player name and a head-to-head record per unordered pair.

    `head_to_head[(a, b)]` (with a < b) is (wins of a, draws, losses of a) against b."""

    ratings: Mapping[str, Rating] = field(default_factory=dict)
    head_to_head: Mapping[Pair, Record] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Copy into read-only views so that a frozen League cannot change under us.
        ratings = {str(k): Rating(float(r.mu), float(r.sigma)) for k, r in self.ratings.items()}
        h2h: dict[Pair, Record] = {}
        for (a, b), counts in self.head_to_head.items():
            if not a < b:
                raise ValueError(
                    f"head_to_head key ({a!r}, {b!r}) is not canonical: use pair_key(a, b)"
                )
            wins, draws, losses = (int(c) for c in counts)
            if min(wins, draws, losses) < 0:
                raise ValueError(f"negative counts {counts} for ({a!r}, {b!r})")
            h2h[(a, b)] = (wins, draws, losses)
        object.__setattr__(self, "ratings", MappingProxyType(ratings))
        object.__setattr__(self, "head_to_head", MappingProxyType(h2h))

    @property
    def names(self) -> list[str]:
        """Every rated or recorded player, sorted by ordinal (best first), then name."""
        found = set(self.ratings) | {n for pair in self.head_to_head for n in pair}
        return sorted(found, key=lambda n: (-self.rating(n).ordinal, n))

    def rating(self, name: str) -> Rating:
        """The player's rating; the model's default for a name never rated."""
        return self.ratings.get(name, Rating())

    def versus(self, name: str, other: str) -> Record:
        """(wins, draws, losses) of `name` against `other`."""
        wins, draws, losses = self.head_to_head.get(pair_key(name, other), (0, 0, 0))
        return (wins, draws, losses) if name <= other else (losses, draws, wins)

    def totals(self, name: str) -> Record:
        """(wins, draws, losses) of `name` against everyone."""
        wins = draws = losses = 0
        for (a, b), (w, d, lo) in self.head_to_head.items():
            if name == a:
                wins, draws, losses = wins + w, draws + d, losses + lo
            elif name == b:
                wins, draws, losses = wins + lo, draws + d, losses + w
        return (wins, draws, losses)

    def games(self, name: str) -> int:
        return sum(self.totals(name))


def _ranks(returns: tuple[float, float]) -> list[float]:
    """openskill ranks (lower is better) of seats 0 and 1; equal returns tie."""
    r0, r1 = returns
    if r0 > r1:
        return [1.0, 2.0]
    if r0 < r1:
        return [2.0, 1.0]
    return [1.0, 1.0]


def record(league: League, episodes: Iterable[Episode]) -> League:
    """A new League with `episodes` rated one by one, in order (self-play skipped)."""
    model = PlackettLuce()
    ratings = dict(league.ratings)
    h2h = dict(league.head_to_head)
    for ep in episodes:
        a, b = ep.agents
        if a == b:
            continue
        for value in ep.returns:
            if not math.isfinite(value):
                raise ValueError(
                    f"episode {ep.game_id} seed {ep.seed} has non-finite returns {ep.returns}"
                )
        ranks = _ranks(ep.returns)
        before = [ratings.get(n, Rating()) for n in (a, b)]
        teams = [[model.rating(mu=r.mu, sigma=r.sigma)] for r in before]
        after = model.rate(teams, ranks=ranks)
        ratings[a] = Rating(float(after[0][0].mu), float(after[0][0].sigma))
        ratings[b] = Rating(float(after[1][0].mu), float(after[1][0].sigma))
        key = pair_key(a, b)
        wins, draws, losses = h2h.get(key, (0, 0, 0))
        if ranks[0] == ranks[1]:
            draws += 1
        elif (ranks[0] < ranks[1]) == (key[0] == a):  # the pair's first name won
            wins += 1
        else:
            losses += 1
        h2h[key] = (wins, draws, losses)
    return League(ratings, h2h)


def to_json(league: League) -> dict[str, Any]:
    """A JSON-able dict. `ordinal` and `games` are written for readers and ignored by
    `from_json` (they follow from the rest)."""
    return {
        "model": MODEL,
        "ratings": {
            name: {
                "mu": r.mu,
                "sigma": r.sigma,
                "ordinal": r.ordinal,
                "games": league.games(name),
            }
            for name, r in sorted(league.ratings.items())
        },
        "head_to_head": [
            {"a": a, "b": b, "wins_a": w, "draws": d, "losses_a": lo}
            for (a, b), (w, d, lo) in sorted(league.head_to_head.items())
        ],
    }


def from_json(data: Mapping[str, Any] | str) -> League:
    """Inverse of `to_json`; also accepts the dict serialised to a JSON string."""
    parsed = json.loads(data) if isinstance(data, str) else data
    if "ratings" not in parsed or "head_to_head" not in parsed:
        raise ValueError(
            "league from_json expects {'ratings': {...}, 'head_to_head': [...]} as written "
            f"by to_json; got keys {sorted(parsed)}"
        )
    model = parsed.get("model", MODEL)
    if model != MODEL:
        raise ValueError(f"league was rated with {model!r}; this code rates with {MODEL!r}")
    ratings = {
        str(name): Rating(float(r["mu"]), float(r["sigma"]))
        for name, r in parsed["ratings"].items()
    }
    h2h = {
        pair_key(str(row["a"]), str(row["b"])): (
            int(row["wins_a"]),
            int(row["draws"]),
            int(row["losses_a"]),
        )
        for row in parsed["head_to_head"]
    }
    return League(ratings, h2h)


def metrics(league: League, prefix: str = "league") -> dict[str, float]:
    """`{prefix}/{name}/mu`, `/sigma`, `/ordinal`, `/games` for every player."""
    out: dict[str, float] = {}
    for name in league.names:
        r = league.rating(name)
        out[f"{prefix}/{name}/mu"] = r.mu
        out[f"{prefix}/{name}/sigma"] = r.sigma
        out[f"{prefix}/{name}/ordinal"] = r.ordinal
        out[f"{prefix}/{name}/games"] = float(league.games(name))
    return out


def _cell(name: str) -> str:
    return name.replace("|", "\\|")


def table(league: League) -> str:
    """Markdown: one row per player, best ordinal first; win rate (draws count as not
    won) with its 95% Wilson interval over all the player's games."""
    lines = [
        "| name | mu | sigma | ordinal | games | W-D-L | win rate [95% CI] |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in league.names:
        r = league.rating(name)
        wins, draws, losses = league.totals(name)
        games = wins + draws + losses
        rate = Rate(wins, games).fmt() if games else DASH
        lines.append(
            f"| {_cell(name)} | {r.mu:.2f} | {r.sigma:.2f} | {r.ordinal:.2f} | {games} "
            f"| {wins}-{draws}-{losses} | {rate} |"
        )
    return "\n".join(lines) + "\n"


def win_matrix(league: League) -> str:
    """Markdown: the row player's win rate against the column player (games in
    parentheses); players in table order; "—" on the diagonal and for unplayed pairs."""
    names = league.names
    lines = [
        "| row vs column | " + " | ".join(_cell(n) for n in names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for row in names:
        cells = []
        for col in names:
            wins, draws, losses = league.versus(row, col)
            games = wins + draws + losses
            cells.append(DASH if row == col or not games else f"{wins / games:.2f} ({games})")
        lines.append(f"| {_cell(row)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_league(path: Path, league: League) -> Path:
    """Write `to_json(league)` plus the markdown table to `path` (league.json), atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {**to_json(league), "table": table(league)}
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(data, indent=2) + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def round_robin_specs(
    names: Sequence[str],
    game_ids: Sequence[str],
    games: int,
    seed: int = 0,
    game_params: Mapping[str, object] | None = None,
) -> list[GameSpec]:
    """Every pair of `names` in both seat orders, `games` games per ordered pair and game.

    Round by round (game k of every pairing before game k + 1 of any), so the sequential
    rating does not see one pair's games all at once. Both seat orders of a pairing get
    the same deal: the seed depends on (game, pair, k), not on the seat order."""
    if len(set(names)) != len(names):
        raise ValueError(f"round robin needs distinct names, got {list(names)}")
    if games < 1:
        raise ValueError(f"games must be >= 1, got {games}")
    specs: list[GameSpec] = []
    for k in range(games):
        for g, game_id in enumerate(game_ids):
            for i, a in enumerate(names):
                for j in range(i + 1, len(names)):
                    b = names[j]
                    game_seed = derive_seed(seed, g, i, j, k)
                    for seats in ((a, b), (b, a)):
                        specs.append(GameSpec(game_id, game_seed, seats, dict(game_params or {})))
    return specs


def play_round_robin(
    players: Mapping[str, Agent],
    game_ids: Sequence[str],
    games: int,
    invalid: InvalidMovePolicy,
    seed: int = 0,
    game_params: Mapping[str, object] | None = None,
) -> list[Episode]:
    """Play `round_robin_specs` over `players` (label -> agent, each built once) in one
    rollout: a model-backed player gets one batched call per wave for all its games.
    Episodes come back in spec order, ready for `record`."""
    specs = round_robin_specs(list(players), game_ids, games, seed, game_params)
    return play_games(specs, players, invalid, seed=derive_seed(seed, 7))
