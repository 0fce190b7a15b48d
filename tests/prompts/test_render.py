"""build_prompt, encode (one BOS at most), constraint_for, and the golden prompt files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spiral import games
from spiral.games.base import State
from spiral.prompts import (
    PromptSpec,
    answer_marker,
    build_prompt,
    constraint_for,
    encode,
    parse_move,
)
from spiral.prompts.render import GOLDEN_GAMES, golden_prompts, prefix_free
from spiral.prompts.templates import BOXED_INSTRUCTION, render

GOLDEN_DIR = Path(__file__).resolve().parents[1] / "golden_prompts"
REGENERATE = "python -m spiral.prompts.render --write tests/golden_prompts"
PREAMBLE = "You are playing a two-player zero-sum game. Make valid actions to win."
GRID_RULES = (
    "You are playing Grid. Take one free cell per turn; the game ends when all nine are taken."
)
GRID_MOVES = "Available Moves: '[0]', '[1]', '[2]', '[3]', '[4]', '[5]', '[6]', '[7]', '[8]'"


# ---- build_prompt -------------------------------------------------------------------


def test_qwen3_boxed_prompt_wraps_the_history_observation(grid: State) -> None:
    text = build_prompt(grid, 0, PromptSpec(template="qwen3", answer_format="boxed"))
    observation = f"[GAME] {GRID_RULES}\n[GAME] {GRID_MOVES}"
    assert text == render("qwen3", observation, BOXED_INSTRUCTION)


def test_bracket_example_is_the_first_legal_move(grid: State) -> None:
    grid.apply_action("[0]")
    text = build_prompt(grid, 1, PromptSpec(template="plain"))
    assert text.endswith("written in square brackets, e.g. [1].\n")
    assert "Player 0 took cell [0]." in text


def test_latest_style_observation(grid: State) -> None:
    grid.apply_action("[4]")
    text = build_prompt(grid, 1, PromptSpec(template="plain", obs_style="latest"))
    moves = GRID_MOVES.replace("'[4]', ", "")
    assert f"Observation: {GRID_RULES}\n\n{moves}\n\nNext Action:\n" in text


def test_system_rules_move_out_of_the_observation(grid: State) -> None:
    spec = PromptSpec(template="chatml", system_rules=True)
    text = build_prompt(grid, 0, spec)
    assert text == (
        f"<|im_start|>system\n{GRID_RULES}<|im_end|>\n"
        f"<|im_start|>user\n{PREAMBLE}\nObservation: [GAME] {GRID_MOVES}\n"
        "Answer with exactly one of the available moves, written in square brackets, "
        "e.g. [0].<|im_end|>\n<|im_start|>assistant\n"
    )
    latest = build_prompt(
        grid, 0, PromptSpec(template="plain", obs_style="latest", system_rules=True)
    )
    assert latest.startswith(f"{GRID_RULES}\n\n{PREAMBLE}\nObservation: {GRID_MOVES}\n\nNext")


def test_constrained_prompt_ends_with_the_marker_only_without_budget(grid: State) -> None:
    direct = PromptSpec(template="qwen3", answer_format="constrained")
    assert answer_marker(direct) == "\nMove:"
    assert build_prompt(grid, 0, direct).endswith("<|im_start|>assistant\n\nMove:")
    thinking = PromptSpec(template="qwen3", answer_format="constrained", think_budget=16)
    text = build_prompt(grid, 0, thinking)
    assert text.endswith("<|im_start|>assistant\n") and "e.g. Move: [0]." in text


def test_chat_template_prompt(grid: State, tokenizer: Any) -> None:
    text = build_prompt(grid, 0, PromptSpec(), tokenizer)
    assert text.startswith(f"<s><|im_start|>user\n{PREAMBLE}\nObservation: [GAME] ")
    assert text.endswith("e.g. [0].<|im_end|>\n<|im_start|>assistant\n")


def test_build_prompt_refuses_a_finished_game(make_menu: Any) -> None:
    state = make_menu(["[a]"])
    state.apply_action("[a]")
    with pytest.raises(ValueError, match="the game is over"):
        build_prompt(state, 0, PromptSpec(template="plain"))


# ---- encode -------------------------------------------------------------------------


def test_encode_never_duplicates_bos(grid: State, tokenizer: Any) -> None:
    bos = tokenizer.bos_token_id
    assert tokenizer.encode("", add_special_tokens=True) == [bos]  # this tokenizer adds BOS
    chat = build_prompt(grid, 0, PromptSpec(), tokenizer)  # the template writes "<s>"
    ids = encode(chat, tokenizer)
    assert ids[0] == bos and ids.count(bos) == 1
    assert tokenizer.decode(ids) == chat
    plain = build_prompt(grid, 0, PromptSpec(template="plain"))  # no BOS in the text
    ids = encode(plain, tokenizer)
    assert ids == [bos, *tokenizer.encode(plain, add_special_tokens=False)]


def test_encode_adds_nothing_for_a_tokenizer_without_bos(grid: State, bare_tokenizer: Any) -> None:
    text = build_prompt(grid, 0, PromptSpec(template="qwen3"))
    assert encode(text, bare_tokenizer) == bare_tokenizer.encode(text, add_special_tokens=False)


def test_encode_llama3_template_keeps_its_own_bos(llama_tokenizer: Any) -> None:
    llama = llama_tokenizer
    assert llama.encode("", add_special_tokens=True) == [llama.bos_token_id]
    text = render("llama3", "obs", "Do it.")
    ids = encode(text, llama)
    assert ids[0] == llama.bos_token_id and ids.count(llama.bos_token_id) == 1


# ---- constraint_for -----------------------------------------------------------------


def test_constraint_only_for_the_constrained_format(grid: State, tokenizer: Any) -> None:
    assert constraint_for(grid, PromptSpec(answer_format="bracket"), tokenizer) is None
    assert constraint_for(grid, PromptSpec(answer_format="boxed"), tokenizer) is None


def test_constraint_choices_follow_the_prompt(grid: State, tokenizer: Any) -> None:
    spec = PromptSpec(template="qwen3", answer_format="constrained")
    constraint = constraint_for(grid, spec, tokenizer)
    assert constraint is not None
    assert (constraint.marker, constraint.think_budget) == ((), 0)
    assert len(constraint.choices) == 9
    prompt_ids = encode(build_prompt(grid, 0, spec), tokenizer)
    for move, choice in zip(grid.legal_actions(), constraint.choices, strict=True):
        text = tokenizer.decode(prompt_ids + list(choice))
        assert text.endswith(f"\nMove: {move}")
    _assert_prefix_free(constraint.choices)


def test_constraint_with_think_budget_forces_the_marker(bids: State, tokenizer: Any) -> None:
    spec = PromptSpec(template="qwen3", answer_format="constrained", think_budget=24)
    constraint = constraint_for(bids, spec, tokenizer)
    assert constraint is not None and constraint.think_budget == 24
    assert tokenizer.decode(list(constraint.marker)) == "\nMove:"
    decoded = [tokenizer.decode(list(constraint.marker + c)) for c in constraint.choices]
    assert decoded == ["\nMove: [Bid: 3, 5]", "\nMove: [Bid: 4, 2]", "\nMove: [Call]"]


def test_prefix_related_moves_get_eos(make_menu: Any, tokenizer: Any) -> None:
    state = make_menu(["[a]", "[a] [b]", "[c]"])
    spec = PromptSpec(answer_format="constrained")
    constraint = constraint_for(state, spec, tokenizer)
    assert constraint is not None
    eos = tokenizer.eos_token_id
    assert all(choice[-1] == eos for choice in constraint.choices)
    _assert_prefix_free(constraint.choices)


def test_prefix_free_by_hand() -> None:
    assert prefix_free([(1, 2), (1, 3), (4,)], eos_id=9) == ((1, 2), (1, 3), (4,))
    assert prefix_free([(1, 2, 3), (5,), (1, 2)], eos_id=9) == ((1, 2, 3, 9), (5, 9), (1, 2, 9))
    with pytest.raises(ValueError, match="no eos id"):
        prefix_free([(1,), (1, 2)], eos_id=None)
    with pytest.raises(ValueError, match=r"moves \[x\] and \[y\] encode to the same"):
        prefix_free([(1, 2), (1, 2)], eos_id=9, names=["[x]", "[y]"])
    with pytest.raises(ValueError, match="encodes to no tokens"):
        prefix_free([()], eos_id=9)


def _assert_prefix_free(choices: tuple[tuple[int, ...], ...]) -> None:
    for i, a in enumerate(choices):
        for j, b in enumerate(choices):
            assert i == j or b[: len(a)] != a, f"choice {a} is a prefix of {b}"


# ---- golden prompt files ------------------------------------------------------------


@pytest.mark.parametrize("game_id", GOLDEN_GAMES)
def test_golden_prompts(game_id: str) -> None:
    if game_id not in games.ids():
        pytest.skip(f"{game_id} is not registered in spiral.games yet; no golden prompts")
    for name, text in golden_prompts(game_id).items():
        path = GOLDEN_DIR / name
        assert path.exists(), f"missing golden prompt {path}; create it with: {REGENERATE}"
        expected = path.read_text(encoding="utf-8")
        assert text == expected, (
            f"the prompt for {name} changed. If the change is intended, regenerate with "
            f"`{REGENERATE}` and review the diff in git."
        )


# ---- the real games -----------------------------------------------------------------


def _real(game_id: str) -> State:
    if game_id not in games.ids():
        pytest.skip(f"{game_id} is not registered in spiral.games yet")
    return games.make(game_id, seed=0)


def test_real_games_parse_the_originals_answers() -> None:
    boxed = PromptSpec(template="qwen3", answer_format="boxed")
    ttt = _real("TicTacToe-v0")
    assert parse_move("Center. \\boxed{4}", ttt, boxed).move == "[4]"
    assert parse_move("\\boxed{[ 8 ]}", ttt, boxed).move == "[8]"
    kuhn = _real("KuhnPoker-v1")
    assert parse_move("\\boxed{Check}", kuhn, boxed).move == "[check]"
    bracket = PromptSpec(template="qwen3", answer_format="bracket")
    assert parse_move("I hold a weak card.\n[bet]", kuhn, bracket).move == "[bet]"


@pytest.mark.parametrize("game_id", GOLDEN_GAMES)
def test_real_game_constraint_decodes_to_each_legal_move(game_id: str, tokenizer: Any) -> None:
    state = _real(game_id)
    seat = state.current_player()
    spec = PromptSpec(template="qwen3", answer_format="constrained")
    constraint = constraint_for(state, spec, tokenizer)
    assert constraint is not None
    prompt_ids = encode(build_prompt(state, seat, spec), tokenizer)
    decoded = [tokenizer.decode(prompt_ids + list(c))[-30:] for c in constraint.choices]
    assert all(
        d.endswith(f"Move: {m}") for d, m in zip(decoded, state.legal_actions(), strict=True)
    )


def _play(state: State, *moves: str) -> State:
    for move in moves:
        state.apply_action(move)
    return state


def test_brief_tictactoe_prompt_holds_the_position_and_little_else() -> None:
    state = _play(games.make("TicTacToe-v0"), "[4]", "[0]", "[8]")
    spec = PromptSpec(template="plain", answer_format="constrained", style="brief")
    brief = build_prompt(state, 1, spec)
    focused = build_prompt(
        state, 1, PromptSpec(template="plain", answer_format="constrained", style="focused")
    )
    # Seat 1 plays X; the board row by row, marks where played, numbers where free.
    assert "You are X, your opponent O" in brief
    assert "X 1 2\n3 O 5\n6 7 O" in brief
    assert "Your legal moves: [1], [2], [3], [5], [6], [7]." in brief
    assert brief.endswith(answer_marker(spec))
    assert "Available Moves" not in brief and "Player 1" not in brief
    assert len(brief) * 2 < len(focused)


def test_brief_kuhn_prompt_keeps_the_card_and_the_betting() -> None:
    state = _play(games.make("KuhnPokerSingle-v0", cards=(0, 2)), "[bet]")
    spec = PromptSpec(template="plain", answer_format="constrained", style="brief")
    text = build_prompt(state, 1, spec)
    assert "cards J < Q < K" in text
    assert "Betting so far: Player 0 bet 1 chip.\nYour card: K." in text
    assert "Your legal moves: [fold], [call]." in text
    assert "Action Rules" not in text


def test_brief_style_without_a_brief_form_is_the_focused_prompt() -> None:
    state = games.make("KuhnPoker-v1")
    assert state.brief(state.current_player()) is None
    seat = state.current_player()
    as_brief = build_prompt(
        state, seat, PromptSpec(template="plain", answer_format="constrained", style="brief")
    )
    as_focused = build_prompt(
        state, seat, PromptSpec(template="plain", answer_format="constrained", style="focused")
    )
    assert as_brief == as_focused


def test_brief_tictactoe_prompt_tells_apart_positions_that_differ() -> None:
    """Two different boards never give one prompt (the learner would merge their rows)."""
    seen: dict[str, tuple[int, ...]] = {}
    spec = PromptSpec(template="plain", answer_format="constrained", style="brief")
    frontier = [games.make("TicTacToe-v0")]
    for _ in range(3):  # every position after 0-2 moves
        nxt = []
        for state in frontier:
            text = build_prompt(state, state.current_player(), spec)
            assert seen.setdefault(text, state.board) == state.board
            for move in state.legal_actions():
                child = state.clone()
                child.apply_action(move)
                nxt.append(child)
        frontier = nxt
    assert len(seen) == 1 + 9 + 72


def test_focused_prompt_over_a_latest_view_states_the_situation_once() -> None:
    state = games.make("KuhnPokerSingle-v0", cards=(0, 2))
    state.apply_action("[check]")
    for obs_style in ("latest", "history"):
        text = build_prompt(
            state, 1, PromptSpec(template="plain", obs_style=obs_style, style="focused")
        )
        assert text.count("Your card: K.") == 1, obs_style
