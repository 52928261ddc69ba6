"""Turing machines: the reference simulator, a catalog and random machines (Wei, Chen & Ma, Section 4).

Conventions (the paper leaves them implicit; see the chapter): the tape is two-way infinite; the input
fills cells 1..m and every other cell holds the blank; the head starts on cell 1 in the initial state.
Step i: (z_i, u_i, q_i) = delta(z_{i-1}, a_{i-1}); write u_i at l_{i-1}; move l_i = l_{i-1} + q_i; read
a_i = tape[l_i]. Accept and reject states are terminal: they keep their state, rewrite the symbol they
read and move right.
"""
from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

Transition = tuple[str, str, int]
PRE = "<pre>"  # the transformer's pre-step state (App. C), reserved: no machine may name a state so
RESERVED_STATES = frozenset({PRE})


@dataclass
class RunResult:
    """A run of T steps: ``states`` and ``heads`` have length T+1; ``tape`` maps cells to symbols
    (the input cells and every written cell)."""

    accepted: bool
    states: list[str]
    heads: list[int]
    tape: dict[int, str] = field(default_factory=dict)
    blank: str = "_"

    def tape_string(self) -> str:
        """The tape from its leftmost to its rightmost non-blank cell."""
        cells = [c for c, s in self.tape.items() if s != self.blank]
        if not cells:
            return ""
        return "".join(self.tape.get(c, self.blank) for c in range(min(cells), max(cells) + 1))

    def same_as(self, other: "RunResult") -> bool:
        return (self.accepted, self.states, self.heads, self.tape) == (other.accepted, other.states, other.heads, other.tape)


class TuringMachine:
    """``delta`` maps (state, symbol) to (next_state, written_symbol, move), move in {-1, +1}."""

    def __init__(self, delta: Mapping[tuple[str, str], Transition], initial: str,
                 accept: Iterable[str], reject: Iterable[str] = (), blank: str = "_"):
        if not isinstance(blank, str) or len(blank) != 1:
            raise ValueError(f"blank must be a single character, got {blank!r}")
        if not isinstance(delta, Mapping):
            raise ValueError("delta must be a mapping (state, symbol) -> (state, symbol, move), "
                             f"got {type(delta).__name__}")
        for arg, names in (("accept", accept), ("reject", reject)):
            if isinstance(names, str) or not isinstance(names, Iterable):
                raise ValueError(f"{arg} must be an iterable of state names (not one str), got {names!r}")
        self.blank, self.initial = blank, initial
        self.accept, self.reject = frozenset(accept), frozenset(reject)
        if not isinstance(initial, str):
            raise ValueError(f"initial must be a state name (str), got {initial!r}")
        if self.accept & self.reject:
            raise ValueError(f"accept and reject share states {sorted(self.accept & self.reject)}")
        symbols, states = {blank}, [initial]
        for key, value in delta.items():
            if not (isinstance(key, tuple) and len(key) == 2 and isinstance(value, tuple) and len(value) == 3):
                raise ValueError(f"delta entries must be (state, symbol) -> (state, symbol, move), got {key!r} -> {value!r}")
            (z, a), (z2, u, q) = key, value
            for s in (a, u):
                if not isinstance(s, str) or len(s) != 1:
                    raise ValueError(f"symbols must be single characters, got {s!r} in {key!r} -> {value!r}")
            if not isinstance(z, str) or not isinstance(z2, str):
                raise ValueError(f"states must be strings, got {key!r} -> {value!r}")
            if q not in (-1, 1) or isinstance(q, bool):
                raise ValueError(f"move must be -1 or +1, got {q!r} in {key!r} -> {value!r}")
            symbols |= {a, u}
            states += [z, z2]
        for arg, names in (("initial", {initial}), ("delta", set(states[1:])), ("accept", self.accept),
                           ("reject", self.reject)):
            if names & RESERVED_STATES:
                raise ValueError(f"{arg} uses the reserved state name {PRE!r} (the transformer's pre-step); "
                                 f"state names may be any str except {sorted(RESERVED_STATES)}")
        states += sorted(self.accept) + sorted(self.reject)
        self.states = list(dict.fromkeys(states))
        self.alphabet = [blank] + sorted(symbols - {blank})
        self.delta: dict[tuple[str, str], Transition] = {}
        terminal = self.accept | self.reject
        for z in self.states:
            for a in self.alphabet:
                if z in terminal:
                    if (z, a) in delta and tuple(delta[(z, a)]) != (z, a, 1):
                        raise ValueError(f"terminal state {z!r} must loop as ({z!r}, {a!r}, +1), got {delta[(z, a)]!r}")
                    self.delta[(z, a)] = (z, a, 1)
                elif (z, a) not in delta:
                    raise ValueError(f"delta has a hole: no transition for (state {z!r}, symbol {a!r})")
                else:
                    self.delta[(z, a)] = tuple(delta[(z, a)])

    def check_input(self, x: str) -> None:
        if not isinstance(x, str):
            raise ValueError(f"x must be a string, got {x!r}")
        bad = sorted(set(x) - set(self.alphabet))
        if bad:
            raise ValueError(f"input symbols {bad} are outside the alphabet {self.alphabet}")

    def run(self, x: str, T: int) -> RunResult:
        """Run exactly T steps on input x."""
        self.check_input(x)
        if isinstance(T, bool) or not isinstance(T, int) or T < 0:
            raise ValueError(f"T must be a non-negative int, got {T!r}")
        tape = {i + 1: s for i, s in enumerate(x)}
        z, head = self.initial, 1
        states, heads = [z], [head]
        for _ in range(T):
            z, u, q = self.delta[(z, tape.get(head, self.blank))]
            tape[head] = u
            head += q
            states.append(z)
            heads.append(head)
        return RunResult(z in self.accept, states, heads, tape, self.blank)

    def tape_history(self, x: str, T: int) -> list[dict[int, str]]:
        """The tape before step 1 and after each of the T steps (T+1 dicts)."""
        run = self.run(x, T)
        tape = {i + 1: s for i, s in enumerate(x)}
        history = [dict(tape)]
        for t in range(T):
            tape[run.heads[t]] = self.delta[(run.states[t], tape.get(run.heads[t], self.blank))][1]
            history.append(dict(tape))
        return history

    def runtime(self, x: str, limit: int) -> int:
        """Steps until a terminal state is entered (``limit`` if none is reached by then)."""
        terminal = self.accept | self.reject
        states = self.run(x, limit).states
        return next((t for t, z in enumerate(states) if z in terminal), limit)


def last_writes(heads: Sequence[int]) -> list[int | None]:
    """For each step t, i' = max{t' <= t : l_{t'-1} = l_t} with l_{-1} = 0 (the pre-step writes cell 0), or None."""
    previous = [0] + list(heads[:-1])  # l_{t'-1} for t' = 0..T
    return [max((tp for tp in range(t + 1) if previous[tp] == heads[t]), default=None) for t in range(len(heads))]


def all_strings(symbols: Sequence[str], max_len: int) -> list[str]:
    """Every string over ``symbols`` of length 0..max_len."""
    return ["".join(p) for n in range(max_len + 1) for p in itertools.product(symbols, repeat=n)]


def _table(rules: Mapping[str, Mapping[str, Transition]]) -> dict[tuple[str, str], Transition]:
    return {(z, a): t for z, row in rules.items() for a, t in row.items()}


def parity() -> TuringMachine:
    """Accept binary strings with an even number of 1s."""
    R = 1
    rules = {"even": {"0": ("even", "0", R), "1": ("odd", "1", R), "_": ("acc", "_", R)},
             "odd": {"0": ("odd", "0", R), "1": ("even", "1", R), "_": ("rej", "_", R)}}
    return TuringMachine(_table(rules), "even", accept=["acc"], reject=["rej"])


def palindrome() -> TuringMachine:
    """Accept binary palindromes: match and erase the outer symbols, sweeping back and forth."""
    R, L = 1, -1
    rules = {
        "start": {"0": ("have0", "_", R), "1": ("have1", "_", R), "_": ("acc", "_", R)},
        "have0": {"0": ("have0", "0", R), "1": ("have0", "1", R), "_": ("check0", "_", L)},
        "have1": {"0": ("have1", "0", R), "1": ("have1", "1", R), "_": ("check1", "_", L)},
        "check0": {"0": ("back", "_", L), "1": ("rej", "1", R), "_": ("acc", "_", R)},
        "check1": {"1": ("back", "_", L), "0": ("rej", "0", R), "_": ("acc", "_", R)},
        "back": {"0": ("back", "0", L), "1": ("back", "1", L), "_": ("start", "_", R)},
    }
    return TuringMachine(_table(rules), "start", accept=["acc"], reject=["rej"])


def balanced() -> TuringMachine:
    """Accept balanced parentheses: repeatedly pair the first ')' with the nearest '(' to its left, marking both X."""
    R, L = 1, -1
    rules = {
        "scan": {"(": ("scan", "(", R), "X": ("scan", "X", R), ")": ("match", "X", L), "_": ("verify", "_", L)},
        "match": {"(": ("home", "X", L), "X": ("match", "X", L), ")": ("rej", ")", R), "_": ("rej", "_", R)},
        "home": {"(": ("home", "(", L), "X": ("home", "X", L), ")": ("home", ")", L), "_": ("scan", "_", R)},
        "verify": {"X": ("verify", "X", L), "(": ("rej", "(", R), ")": ("rej", ")", R), "_": ("acc", "_", R)},
    }
    return TuringMachine(_table(rules), "scan", accept=["acc"], reject=["rej"])


def copy() -> TuringMachine:
    """Transducer w -> w#w on {a, b}: mark a symbol (A/B), carry it past '#' to the end, return, repeat."""
    R, L = 1, -1
    rules = {
        "start": {"a": ("carry_a", "A", R), "b": ("carry_b", "B", R), "#": ("restore", "#", L), "_": ("sep", "#", L),
                  "A": ("rej", "A", R), "B": ("rej", "B", R)},
        "sep": {s: ("find", s, R) for s in "abAB#_"},
        "find": {"a": ("find", "a", R), "b": ("find", "b", R), "#": ("restore", "#", L), "_": ("sep2", "#", L),
                 "A": ("find", "A", R), "B": ("find", "B", R)},
        "sep2": {s: ("rewind", s, L) for s in "abAB#_"},
        "rewind": {"a": ("rewind", "a", L), "b": ("rewind", "b", L), "A": ("start2", "A", R), "B": ("start2", "B", R),
                   "#": ("rewind", "#", L), "_": ("start", "_", R)},
        "start2": {"a": ("carry_a", "A", R), "b": ("carry_b", "B", R), "#": ("restore", "#", L), "_": ("rej", "_", R),
                   "A": ("rej", "A", R), "B": ("rej", "B", R)},
        "restore": {"A": ("restore", "a", L), "B": ("restore", "b", L), "a": ("restore", "a", L), "b": ("restore", "b", L),
                    "#": ("restore", "#", L), "_": ("acc", "_", R)},
    }
    for sym in "ab":
        rules[f"carry_{sym}"] = {"a": (f"carry_{sym}", "a", R), "b": (f"carry_{sym}", "b", R), "A": (f"carry_{sym}", "A", R),
                                 "B": (f"carry_{sym}", "B", R), "#": (f"past_{sym}", "#", R), "_": (f"past_{sym}", "#", R)}
        rules[f"past_{sym}"] = {"a": (f"past_{sym}", "a", R), "b": (f"past_{sym}", "b", R), "_": ("rewind", sym, L),
                                "A": ("rej", "A", R), "B": ("rej", "B", R), "#": ("rej", "#", R)}
    return TuringMachine(_table(rules), "start", accept=["acc"], reject=["rej"])


def increment() -> TuringMachine:
    """Binary increment, most significant bit first (cell 1): go to the last bit, add one with carry; overflow rejects."""
    R, L = 1, -1
    rules = {
        "right": {"0": ("right", "0", R), "1": ("right", "1", R), "_": ("carry", "_", L)},
        "carry": {"1": ("carry", "0", L), "0": ("done", "1", L), "_": ("rej", "_", R)},
        "done": {"0": ("done", "0", L), "1": ("done", "1", L), "_": ("acc", "_", R)},
    }
    return TuringMachine(_table(rules), "right", accept=["acc"], reject=["rej"])


def counter() -> TuringMachine:
    """A binary counter that never halts: the number on cells 1, 2, ... (least significant bit first) is
    incremented again and again; after each increment the head walks back to cell 0 and starts over."""
    R, L = 1, -1
    rules = {"inc": {"1": ("inc", "0", R), "0": ("back", "1", L), "_": ("back", "1", L)},
             "back": {"0": ("back", "0", L), "1": ("back", "1", L), "_": ("inc", "_", R)}}
    return TuringMachine(_table(rules), "inc", accept=[])


def residue(k: int = 3) -> TuringMachine:
    """Accept binary strings whose number of 1s is divisible by k; the head only moves right."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 2:
        raise ValueError(f"k must be an int >= 2, got {k!r}")
    rules = {f"r{i}": {"0": (f"r{i}", "0", 1), "1": (f"r{(i + 1) % k}", "1", 1),
                       "_": ("acc" if i == 0 else "rej", "_", 1)} for i in range(k)}
    return TuringMachine(_table(rules), "r0", accept=["acc"], reject=["rej"])


def step_back(tm: TuringMachine) -> TuringMachine:
    """``tm`` with one step left before it halts: a move into a terminal state t goes left into a new state
    ``t'``, which reads the cell written one step earlier and then enters t (moving right)."""
    if not isinstance(tm, TuringMachine):
        raise ValueError(f"tm must be a TuringMachine, got {type(tm).__name__}")
    terminal = tm.accept | tm.reject
    delta = {}
    for (z, a), (z2, u, q) in tm.delta.items():
        if z in terminal:
            continue
        delta[(z, a)] = (f"{z2}'", u, -1) if z2 in terminal else (z2, u, q)
    delta.update({(f"{t}'", a): (t, a, 1) for t in terminal for a in tm.alphabet})
    return TuringMachine(delta, tm.initial, tm.accept, tm.reject, tm.blank)


CATALOG = {"parity": parity, "palindrome": palindrome, "balanced": balanced, "copy": copy, "increment": increment}
CATALOG_SYMBOLS = {"parity": "01", "palindrome": "01", "balanced": "()", "copy": "ab", "increment": "01"}


def random_tm(num_states: int, symbols: str = "01", seed: int = 0, blank: str = "_") -> TuringMachine:
    """A random machine: ``num_states`` working states plus accept/reject, every transition uniform at random."""
    if isinstance(num_states, bool) or not isinstance(num_states, int) or num_states < 1:
        raise ValueError(f"num_states must be an int >= 1, got {num_states!r}")
    rng = random.Random(seed)
    work = [f"q{i}" for i in range(num_states)]
    alphabet = [blank] + list(symbols)
    delta = {(z, a): (rng.choice(work + ["acc", "rej"]), rng.choice(alphabet), rng.choice((-1, 1)))
             for z in work for a in alphabet}
    return TuringMachine(delta, work[0], accept=["acc"], reject=["rej"], blank=blank)
