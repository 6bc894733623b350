"""Grounded numbers: an answer may write only numbers that appear in its conversation.

A small model that read ``176466.65555555557`` in a tool result writes ``176666.65555``: the
digits look right token by token and are wrong as a number. :class:`GroundedNumbers` is a
decoding constraint (the same interface as the JSON one) under which a token holding digits is
taken only if the number being written stays a prefix of an allowed number, and a number ends
only where an allowed one ends. The allowed numbers are those of the user's messages and the
tool results (:func:`conversation_numbers`), as written there, plus the forms a caller's
rounding rule makes of them. A number is a run of ASCII digits with at most one ``.`` between
digits: signs, thousands separators and exponents are text around numbers, so ``1,234`` is two
numbers and can be written only if both are allowed. Inside a ``<tool_call>`` block nothing is
constrained: a call's arguments are the JSON constraint's business, or the model's.
Budget-aware as the JSON constraint is: with ``n`` tokens left a token is allowed only if the
number it starts or continues can end, one character per token, within ``n - 1`` more.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from typing import Any

from aifab.core.errors import InvalidInputError

__all__ = ["GroundedNumbers", "NumberGrounding", "conversation_numbers", "grounding_option"]

_DIGITS = frozenset("0123456789")
_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?")
#: Roles whose text numbers may be copied from: the question and what the tools returned.
_SOURCES = ("user", "tool")
MAX_ROUND = 12

#: ``(number written so far or None outside a number, a '.' after it waits for a digit)``.
State = tuple[str | None, bool]


@dataclass(frozen=True)
class NumberGrounding:
    """Answers are grounded; ``round_to`` also allows each number rounded to that many decimals."""

    round_to: int | None = None


def grounding_option(value: Any, field: str) -> NumberGrounding | None:
    """Read a grounding setting: ``true``/``false``, or ``{"grounded_numbers": bool, "round": N}``.

    Args:
        value: the setting (a request's ``aifab`` object or a deployment option).
        field: its name, for messages.

    Raises:
        InvalidInputError: anything else (the field at fault named).
    """
    if isinstance(value, bool):
        return NumberGrounding() if value else None
    if not isinstance(value, Mapping):
        raise InvalidInputError(f"{field}: expected true/false or {{'grounded_numbers', 'round'}}")
    unknown = sorted(set(value) - {"grounded_numbers", "round"})
    if unknown:
        raise InvalidInputError(f"{field}.{unknown[0]}: unknown field")
    on = value.get("grounded_numbers", False)
    if not isinstance(on, bool):
        raise InvalidInputError(f"{field}.grounded_numbers: expected true or false, got {on!r}")
    round_to = value.get("round")
    if round_to is not None and (
        isinstance(round_to, bool)
        or not isinstance(round_to, int)
        or not 0 <= round_to <= MAX_ROUND
    ):
        raise InvalidInputError(
            f"{field}.round: expected an integer from 0 to {MAX_ROUND}, got {round_to!r}"
        )
    return NumberGrounding(round_to) if on else None


def _forms(number: str, round_to: int | None) -> set[str]:
    """``number`` as written, without an all-zero fraction, and rounded by the caller's rule."""
    forms = {number}
    whole, _, fraction = number.partition(".")
    if fraction and not fraction.strip("0"):
        forms.add(whole)  # 90.0 from an AVG is also 90
    if round_to is not None and len(fraction) > round_to:
        try:
            exact = Decimal(number)
        except InvalidOperation:  # pragma: no cover - the regex only matches decimals
            return forms
        step = Decimal(1).scaleb(-round_to)
        forms.add(str(exact.quantize(step, rounding=ROUND_HALF_EVEN)))
    return forms


def conversation_numbers(
    messages: Iterable[Mapping[str, Any]], grounding: NumberGrounding
) -> frozenset[str]:
    """The numbers an answer to ``messages`` may write: those of user messages and tool results.

    Args:
        messages: OpenAI chat messages (content as text; other roles are skipped).
        grounding: the rounding rule that adds forms of each number.
    """
    numbers: set[str] = set()
    for message in messages:
        if message.get("role") not in _SOURCES:
            continue
        content = message.get("content")
        text = content if isinstance(content, str) else json.dumps(content, default=str)
        for match in _NUMBER.finditer(text or ""):
            numbers |= _forms(match.group(), grounding.round_to)
    return frozenset(numbers)


class GroundedNumbers:
    """The per-request state of number-grounded decoding.

    Args:
        numbers: the numbers that may be written (see :func:`conversation_numbers`).
        vocab: the model's token texts
            (:class:`~aifab.inference.json_constraint.TokenVocabulary`).
    """

    def __init__(self, numbers: Iterable[str], vocab: Any) -> None:
        from aifab.inference.tool_calls import CALL_OPEN

        self.numbers = frozenset(numbers)
        #: Every prefix of an allowed number -> the fewest characters that finish it.
        self.prefixes: dict[str, int] = {}
        for number in self.numbers:
            for end in range(1, len(number) + 1):
                left = len(number) - end
                if left < self.prefixes.get(number[:end], left + 1):
                    self.prefixes[number[:end]] = left
        self.vocab = vocab
        self.state: State = (None, False)
        #: A ``<tool_call>`` block was opened: the rest is not an answer's text.
        self.free = False
        self._open = CALL_OPEN
        self._tail = ""
        #: Per state: whether only ``ids`` are allowed (else ``ids`` are banned), the tokens
        #: that fit sorted by the cost to finish the number after them, and those costs.
        self._memo: dict[State, tuple[bool, list[int], list[int], list[int]]] = {}

    @property
    def closed(self) -> bool:
        """Whether the text so far may end here (not inside an unfinished number)."""
        return self._cost(self.state) == 0

    def feed(self, state: State, text: str) -> State | None:
        """The state after ``text``, or None if it writes a number that is not allowed."""
        number, dot = state
        for char in text:
            if char in _DIGITS:
                grown = char if number is None else f"{number}.{char}" if dot else number + char
                if grown not in self.prefixes:
                    return None
                number, dot = grown, False
            elif number is None:
                continue
            elif char == "." and not dot and "." not in number:
                # A decimal point, or a full stop after the number: the next character says.
                if number not in self.numbers and number + "." not in self.prefixes:
                    return None
                dot = True
            else:
                if number not in self.numbers:
                    return None
                number, dot = None, False
        return number, dot

    def _cost(self, state: State) -> int:
        """Characters still needed before the number being written may end (0 outside one)."""
        number, dot = state
        if number is None or number in self.numbers:
            return 0
        return self.prefixes[f"{number}." if dot else number]

    def _scan(self, state: State) -> tuple[bool, list[int], list[int], list[int]]:
        """Sort the tokens that hold digits or dots into those that fit after ``state`` and not.

        Any other token leaves a finished number (or none) behind, so it fits exactly when the
        state may end: then only the misfits are banned, else only the fits are allowed.
        """
        fits: list[tuple[int, int]] = []
        misfits: list[int] = []
        for token_id, text in self.vocab.numeric:
            after = self.feed(state, text)
            if after is None:
                misfits.append(token_id)
            else:
                fits.append((self._cost(after), token_id))
        fits.sort()
        only = self._cost(state) > 0
        return only, misfits, [t for _, t in fits], [c for c, _ in fits]

    def mask(self, remaining: int | None = None) -> tuple[bool, list[int]]:
        """The tokens allowed next: ``(True, ids)`` only these, ``(False, ids)`` all but these.

        Args:
            remaining: tokens left including this one (None: no budget). A token is allowed
                only if the number after it can end, one character per token, in time.
        """
        if self.free:
            return False, []
        hit = self._memo.get(self.state)
        if hit is None:
            hit = self._memo[self.state] = self._scan(self.state)
        only, misfits, fits, costs = hit
        end = len(fits) if remaining is None else bisect_right(costs, remaining - 1)
        if only:
            if end == 0 and costs:
                end = bisect_right(costs, costs[0])  # out of budget already: finish fastest
            return True, fits[:end]
        return False, misfits + fits[end:]

    def allowed(self, remaining: int | None = None) -> list[int]:
        """Token ids allowed next, EOS included where the text may end (as a list)."""
        only, ids = self.mask(remaining)
        if only:
            return ids
        banned = set(ids)
        every = [*sorted(self.vocab.eos_ids), *(t for t, _ in self.vocab.texts)]
        return [t for t in every if t not in banned]

    def advance(self, token_id: int, text: str) -> None:
        """Move past a chosen token (its decoded text; ``""`` for a token with no text).

        Raises:
            InvalidInputError: the token writes a number that is not allowed (no mask applied).
        """
        if token_id in self.vocab.eos_ids or self.free:
            return
        seen = self._tail + (text or " ")  # a textless token still separates numbers
        opened = seen.find(self._open)
        if opened >= 0:
            text = seen[len(self._tail) : opened] if opened > len(self._tail) else ""
        state = self.feed(self.state, text or " ")
        if state is None:
            raise InvalidInputError(f"token {token_id} writes a number not in the conversation")
        self.state = state
        if opened >= 0:
            self.free = True
        self._tail = seen[-(len(self._open) - 1) :]
