"""Every two-player game TextArena and OpenSpiel register, tried through Spiral as a user
would: each id either plays or is refused in one line, and the table of states in
docs/games.md is written from the result.

Usage: `python benchmarks/game_catalogue.py OUT.json [--docs docs/games.md] [--ids ID ...]`.

For each id (`textarena:<env id>` without the `-train`/`-raw` variants; `openspiel:<game>`
for every game that admits two players, with `(players=2)` where its default is another
count):
- the check `spiral eval` and `spiral train` make when they read the command line
  (`games.registry.unplayable`): a refusal is recorded with its line and its cause;
- three random games to their end (games that list their moves), each move drawn from
  the game's own list, returns checked zero-sum where the game is (OpenSpiel's utility,
  every TextArena env);
- `spiral eval` of a tiny random model (made here, nothing downloaded; its context set to
  32,768 tokens, as the models people train have, since long games' histories grow) against `random`
  (against itself for free-form games), one game a seat, and one `spiral train` step,
  both in this process through `spiral.cli.main`, each with its exit status.
`spiral eval` plays with `max_turns=40` and the train step with `max_turns=20`, so that a
long game costs seconds. An id that passes all of them "plays" (or plays with a remark: its list of moves is a menu
the game then narrows, or random play needs a turn limit to end); an id whose library
raises inside its own code is marked so; "fails" is left for Spiral's own failures.
Each id runs under a time limit (`--limit`, seconds). Takes about 15 minutes on 2 cores.
`--read-only` makes only the command line's check (seconds): run from a newer checkout
with `PYTHONPATH=<older checkout>` it says what an older Spiral accepted.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import re
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from spiral.cli import main as cli_main
from spiral.games import registry

try:
    from spiral.games.adapters import LibraryFailure
except ImportError:  # an older checkout, read with --read-only
    LibraryFailure = RuntimeError  # type: ignore[misc,assignment]
from spiral.games.base import IllegalMoveError
from spiral.testing import make_tiny_model

BEGIN, END = "<!-- catalogue:begin -->", "<!-- catalogue:end -->"
PLAYS, FREE = "plays", "plays, free-form moves"
MENU = "plays, its list is a menu"  # a listed move may be rejected: an invalid answer
MIXED = "plays, free-form moves at times"  # some positions list no moves
NEEDS_LIMIT = "plays with a turn limit"  # random play did not end: max_turns ends it
BREAKS = "its library fails mid-game"
ACCEPTED = "accepted when read"  # --read-only
CAUSES = (  # refusal line -> cause, first match wins
    ("two players|[0-9]+ players?|player count", "not for two players"),
    ("not zero-sum", "not zero-sum"),
    ("simultaneous", "simultaneous moves"),
    ("lists no legal moves", "lists no moves"),
    ("NLTK|API key|newer Python|package lacks", "needs what this machine lacks"),
    ("cannot be set up", "cannot be set up"),
    ("does not load|parameter", "needs parameters"),
)
RANDOM_GAMES, MOVE_CAP = 3, 1000
CONTEXT = 32_768  # the tiny model's context, as long as the models people train
_INSTALLED = re.compile(r"(?:[A-Za-z]:)?(?:[\\/][^\s'\"\\/]+)+[\\/]site-packages(?=[\\/])")


def portable(note: str) -> str:
    """A note as any machine would write it: where packages are installed is `<site-packages>`."""
    return _INSTALLED.sub("<site-packages>", note)


class TimeLimit(Exception):
    pass


def two_player_ids() -> list[str]:
    ids: list[str] = []
    with contextlib.suppress(ModuleNotFoundError):
        import textarena

        for env_id in textarena.envs.registration.ENV_REGISTRY:
            if not env_id.endswith(("-train", "-raw")):
                ids.append(f"textarena:{env_id}")
    with contextlib.suppress(ModuleNotFoundError):
        import pyspiel

        for game in pyspiel.registered_games():
            if game.min_num_players <= 2 <= game.max_num_players:
                players = game.parameter_specification.get("players")
                two = players is not None and int(players) != 2
                ids.append(f"openspiel:{game.short_name}" + ("(players=2)" if two else ""))
    return ids


def cause(line: str) -> str:
    said = re.sub(r"^'[^']*' ", "", line)  # what is said of the id, not the id itself
    for pattern, name in CAUSES:
        if re.search(pattern, said):
            return name
    return "other"


def zero_sum(game_id: str) -> bool:
    """Whether the game's outcomes must sum to zero: OpenSpiel says so in its type; every
    TextArena two-player env is read as a contest."""
    if not game_id.startswith("openspiel:"):
        return True
    import pyspiel

    spiel_type = registry.make(game_id, seed=0)._game.get_type()  # noqa: SLF001
    return bool(spiel_type.utility == pyspiel.GameType.Utility.ZERO_SUM)


def random_games(game_id: str) -> tuple[list[dict[str, Any]], str, str]:
    """RANDOM_GAMES games of random moves from the game's own list: the games, and the
    state and note they give (a listed move the game rejects is replaced by another
    listed one, and the list is then a menu rather than the legal moves)."""
    played, exact, rejected = [], zero_sum(game_id), ""
    for seed in range(RANDOM_GAMES):
        state, rng, moves = registry.make(game_id, seed=seed), random.Random(seed), 0
        while not state.is_terminal() and moves < MOVE_CAP:
            legal = state.legal_actions()
            if not legal:  # free-form from here on: random play cannot go on
                played.append({"seed": seed, "moves": moves, "returns": None})
                return played, MIXED, f"a position lists no moves after {moves} random moves"
            rng.shuffle(legal)
            for move in legal:
                try:
                    state.apply_action(move)
                    break
                except IllegalMoveError as err:
                    rejected = (
                        rejected
                        or f"it lists moves it then rejects, e.g. {move!r}: "
                        + str(err).partition(": ")[2].partition(": ")[2][:120]
                    )
            else:
                return played, "fails", f"every listed move was rejected after {moves} moves"
            moves += 1
        returns = [round(r, 9) for r in state.returns()]
        played.append({"seed": seed, "moves": moves, "returns": returns})
        if exact and state.is_terminal() and abs(sum(returns)) > 1e-9:
            return played, "fails", f"returns {returns} are not zero-sum"
    if any(g["moves"] >= MOVE_CAP for g in played):
        return (
            played,
            NEEDS_LIMIT,
            f"random play did not end within {MOVE_CAP} moves: give max_turns",
        )
    return played, (MENU if rejected else PLAYS), rejected


def through_cli(argv: list[str]) -> tuple[int, str]:
    """`spiral <argv>` in this process: exit status and the last line it wrote to stderr."""
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            code = cli_main(argv)
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 1
        except Exception as crash:  # a traceback: a failure, recorded as one
            return 1, f"traceback: {type(crash).__name__}: {str(crash).splitlines()[0][:200]}"
    lines = [line for line in err.getvalue().splitlines() if line.strip()]
    return code, (lines[-1][:300] if lines else "")


def model_runs(game_id: str, free: bool, tiny: Path, work: Path) -> str | None:
    """`spiral eval` and one `spiral train` step of the tiny model: what failed, or None.
    Free-form games answer in brackets against the model itself; others are constrained
    to the listed moves against `random`."""
    fmt = "answer_format=bracket" if free else "answer_format=constrained"
    opponent = f"checkpoint:{tiny}" if free else "random"
    code, said = through_cli(
        [
            "eval",
            f"checkpoint={tiny}",
            f"env_ids={game_id}",
            f"opponents={opponent}",
            "games=1",
            "max_tokens=8",
            "max_turns=40",
            fmt,
            f"out={work / 'eval'}",
        ]  # fmt: skip
    )
    if code != 0:
        return f"spiral eval exit {code}: {said}"
    code, said = through_cli(
        [
            "train",
            f"env_ids={game_id}",
            f"model_name={tiny}",
            "max_steps=1",
            "batch_size=2",
            "max_tokens=8",
            "lora_rank=4",
            "eval_every=0",
            "max_turns=20",
            fmt,
            f"log_path={work / 'train'}",
        ]  # fmt: skip
    )
    return f"spiral train exit {code}: {said}" if code != 0 else None


def try_game(game_id: str, tiny: Path | None, work: Path) -> dict[str, Any]:
    row: dict[str, Any] = {"id": game_id}
    with contextlib.redirect_stdout(io.StringIO()):
        refused = registry.unplayable(game_id)
    if refused is not None:
        return {**row, "state": f"refused: {cause(refused)}", "note": portable(refused)}
    if tiny is None:  # --read-only: what the command line's check says, nothing played
        return {**row, "state": ACCEPTED, "note": ""}
    free_check = getattr(registry, "takes_free_moves", None)  # absent in older checkouts
    free = bool(free_check and free_check(game_id))
    state, note = FREE, ""
    if not free:
        try:
            row["random_games"], state, note = random_games(game_id)
        except LibraryFailure as err:
            return {**row, "state": BREAKS, "note": portable(str(err))}
        if state == "fails":
            return {**row, "state": state, "note": note}
    problem = model_runs(game_id, free or state == MIXED, tiny, work)
    if problem:
        return {**row, "state": "fails", "note": problem}
    return {**row, "state": state, "note": note}


def _alarm(signum: int, frame: Any) -> None:
    raise TimeLimit


def _tiny_model(folder: Path) -> Path:
    tiny = make_tiny_model(folder)
    config = json.loads((tiny / "config.json").read_text(encoding="utf-8"))
    config["max_position_embeddings"] = CONTEXT  # a long game's history must fit
    (tiny / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return tiny


def catalogue(ids: list[str], limit: int, read_only: bool = False) -> list[dict[str, Any]]:
    rows = []
    signal.signal(signal.SIGALRM, _alarm)
    with tempfile.TemporaryDirectory() as tmp:
        tiny = None if read_only else _tiny_model(Path(tmp) / "tiny")
        for n, game_id in enumerate(ids, 1):
            begin = time.perf_counter()
            signal.alarm(limit)
            try:
                row = try_game(game_id, tiny, Path(tempfile.mkdtemp(dir=tmp)))
            except TimeLimit:
                row = {"id": game_id, "state": "fails", "note": f"not done in {limit} s"}
            except Exception as crash:
                note = f"traceback: {type(crash).__name__}: {str(crash).splitlines()[0][:200]}"
                row = {"id": game_id, "state": "fails", "note": note}
            finally:
                signal.alarm(0)
            row["seconds"] = round(time.perf_counter() - begin, 2)
            rows.append(row)
            print(f"[{n}/{len(ids)}] {game_id}: {row['state']} {row['note'][:120]}", flush=True)
    return rows


def library(game_id: str) -> str:
    return game_id.partition(":")[0]


def render(record: dict[str, Any]) -> str:
    """The docs block: counts per state and library, then every game with its state."""
    rows = record["games"]
    libs = sorted({library(r["id"]) for r in rows})
    states = sorted({r["state"] for r in rows}, key=lambda s: (not s.startswith("plays"), s))
    out = [
        BEGIN,
        f"Generated by `python benchmarks/game_catalogue.py` on {record['date']} "
        f"({', '.join(f'{k} {v}' for k, v in record['versions'].items())}); checked by "
        "`tests/games/test_catalogue.py`.",
        "",
        "| state | " + " | ".join(libs) + " |",
        "|---|" + "---|" * len(libs),
    ]
    for state in states:
        counts = [
            sum(1 for r in rows if r["state"] == state and library(r["id"]) == lib) for lib in libs
        ]
        out.append(f"| {state} | " + " | ".join(str(c) for c in counts) + " |")
    totals = [sum(1 for r in rows if library(r["id"]) == lib) for lib in libs]
    out += ["| all | " + " | ".join(str(t) for t in totals) + " |", ""]
    out += ["| game | state | why |", "|---|---|---|"]
    for r in sorted(rows, key=lambda r: r["id"].casefold()):
        why = r["note"].replace("|", "\\|").replace(f"{r['id']!r} ", "").replace("\n", " ")
        out.append(f"| `{r['id']}` | {r['state']} | {why} |")
    out.append(END)
    return "\n".join(out)


def write_docs(path: Path, block: str) -> None:
    text = path.read_text(encoding="utf-8")
    if BEGIN in text:
        head, _, rest = text.partition(BEGIN)
        text = head + block + rest.partition(END)[2]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text, encoding="utf-8")


def versions() -> dict[str, str]:
    found = {"python": sys.version.split()[0]}
    for name, module in (("textarena", "textarena"), ("open_spiel", "pyspiel")):
        with contextlib.suppress(Exception):
            from importlib.metadata import version

            found[name] = version(name.replace("_", "-") if module == "pyspiel" else name)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, help="where the JSON record goes")
    parser.add_argument("--docs", type=Path, default=None, help="also rewrite this file's table")
    parser.add_argument("--ids", nargs="*", default=None, help="only these ids")
    parser.add_argument("--limit", type=int, default=300, help="seconds per id")
    parser.add_argument(
        "--read-only", action="store_true", help="only the check made when a command line is read"
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    ids = args.ids or two_player_ids()
    record = {
        "date": time.strftime("%Y-%m-%d"),
        "versions": versions(),
        "command": "python benchmarks/game_catalogue.py " + " ".join(argv or sys.argv[1:]),
        "games": catalogue(ids, args.limit, args.read_only),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    if args.docs is not None:
        write_docs(args.docs, render(record))
    print(render(record).split("\n\n| game")[0])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
