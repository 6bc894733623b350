"""Constrained decoding: tokens that keep JSON valid for a schema and closable in the budget.

:mod:`~aifab.inference.json_schema` compiles the schema (the supported subset is listed there),
:mod:`~aifab.inference.json_acceptor` walks it a character at a time. Per acceptor state the
allowed tokens are computed once, sorted by what closing the document costs after them, so a
budget picks a prefix of that list: with ``n`` tokens left, a token is allowed only if the
document can still be closed in ``n - 1`` more. A request whose ``max_tokens`` is below the
shortest valid instance (:attr:`JsonConstraint.min_tokens`) is refused before decoding.
"""

from __future__ import annotations

import json
from bisect import bisect_right
from typing import Any

from aifab.core.errors import InvalidInputError
from aifab.inference.json_acceptor import State, accepting, closing_cost, feed, step
from aifab.inference.json_schema import compile_schema, min_lengths

__all__ = ["JsonConstraint", "TokenVocabulary", "accepting", "compile_schema", "feed"]


_NUMERIC = frozenset("0123456789.")


class TokenVocabulary:
    """Each token id's text, for trying tokens against a constraint (special tokens left out)."""

    def __init__(self, tokenizer: Any, eos_ids: frozenset[int]) -> None:
        special = set(getattr(tokenizer, "all_special_ids", []) or [])
        self.eos_ids = eos_ids
        self.texts: list[tuple[int, str]] = []
        for token_id in range(len(tokenizer)):
            if token_id in special:
                continue
            text = tokenizer.decode([token_id], clean_up_tokenization_spaces=False)
            if text and "\ufffd" not in text:
                self.texts.append((token_id, text))
        self.text_of = dict(self.texts)
        self.by_first: dict[str, list[tuple[int, str]]] = {}
        for token_id, text in self.texts:
            self.by_first.setdefault(text[0], []).append((token_id, text))
        #: Tokens holding a digit or a dot: the only ones grounded numbers must check.
        self.numeric = [(t, text) for t, text in self.texts if _NUMERIC.intersection(text)]


class JsonConstraint:
    """The per-request state of JSON-constrained decoding.

    Args:
        schema: the JSON schema the output must satisfy (``{}`` for any JSON value; use
            ``{"type": "object"}`` for OpenAI's ``json_object``).
        vocab: the model's token texts.

    Raises:
        InvalidInputError: the schema is outside the supported subset (the keyword is named).
    """

    def __init__(self, schema: dict[str, Any], vocab: TokenVocabulary) -> None:
        self.nodes = compile_schema(schema)
        self.nodes.append(("any", None))  # the helper node for free values (see json_acceptor)
        self.sizes = min_lengths(self.nodes)
        self.vocab = vocab
        self.state: State = (("val", 0),)
        #: Per state: the allowed ids sorted by closing cost after them, and those costs.
        self._memo: dict[State, tuple[list[int], list[int]]] = {}

    @property
    def min_tokens(self) -> int:
        """Tokens the shortest valid output takes at most (one per character)."""
        return self.sizes[0]

    @property
    def complete(self) -> bool:
        """Whether the output so far is a whole valid document."""
        return accepting(self.state, self.nodes)

    def _scan(self, state: State) -> tuple[list[int], list[int]]:
        """Every token allowed after ``state``, sorted by the closing cost after it."""
        pairs: list[tuple[int, int]] = []
        costs: dict[State, int] = {}
        for first, tokens in self.vocab.by_first.items():
            after_first = step(state, first, self.nodes)
            if after_first is None:
                continue
            for token_id, text in tokens:
                after = feed(after_first, text[1:], self.nodes) if len(text) > 1 else after_first
                if after is None:
                    continue
                cost = costs.get(after)
                if cost is None:
                    cost = costs[after] = closing_cost(after, self.nodes, self.sizes)
                pairs.append((cost, token_id))
        pairs.sort()
        return [t for _, t in pairs], [c for c, _ in pairs]

    def _memoized(self, state: State) -> tuple[list[int], list[int]]:
        hit = self._memo.get(state)
        if hit is None:
            hit = self._scan(state)
            if len(self._memo) < 50_000:
                self._memo[state] = hit
        return hit

    def _options(self, remaining: int | None) -> tuple[list[int], list[int]]:
        """The allowed ids and their closing costs in the current state.

        Inside a key of a free object (``{"type": "object"}``, e.g. a tool's free arguments)
        every character typed is a new state, so a memo by state missed on every token and
        each one scanned the whole vocabulary. There the options are those of the key's start,
        shared by every character, with two exact corrections: a token that closes the key (or
        a later one) onto a key already set is dropped, and near the budget's end (where a
        cost that is one off could matter) the state is scanned as it is.
        """
        shared = _key_start(self.state, self.nodes)
        if shared is None or shared == self.state:
            return self._memoized(self.state)
        ids, costs = self._memoized(shared)
        if remaining is not None and costs and remaining - 1 <= costs[-1]:
            return self._scan(self.state)
        text_of = self.vocab.text_of
        drop = {
            t for t in ids if '"' in text_of[t] and feed(self.state, text_of[t], self.nodes) is None
        }
        if not drop:
            return ids, costs
        keep = [k for k, t in enumerate(ids) if t not in drop]
        return [ids[k] for k in keep], [costs[k] for k in keep]

    def allowed(self, remaining: int | None = None) -> list[int]:
        """Token ids that keep the output valid; EOS only once the document is complete.

        Args:
            remaining: tokens left including this one (None: no budget). A token is allowed
                only if the document can still be closed, one character per token, after it.
        """
        ids, costs = self._options(remaining)
        end = len(ids)
        if remaining is not None:
            end = bisect_right(costs, remaining - 1)
            if end == 0 and costs and not self.complete:
                # Out of budget already (the caller gave too few tokens): close the fastest way.
                end = bisect_right(costs, costs[0])
        out = ids[:end]
        if self.complete:
            out = [*sorted(self.vocab.eos_ids), *out]
        return out

    def advance(self, token_id: int, text: str) -> None:
        """Move past a chosen token (its decoded text).

        Raises:
            InvalidInputError: the token cannot follow (the mask was not applied).
        """
        if token_id in self.vocab.eos_ids:
            return
        state = feed(self.state, text, self.nodes)
        if state is None:
            raise InvalidInputError(f"token {token_id} breaks the JSON constraint")
        self.state = state

    def parse(self, text: str) -> Any:
        """The finished output as JSON (it parses whenever generation ended at EOS)."""
        return json.loads(text)


def _key_start(state: State, nodes: list[Any]) -> State | None:
    """``state`` with its key so far and the keys set forgotten, inside a free object's key.

    Neither changes which characters may come there. None outside such a key.
    """
    if not state or state[-1][0] != "obj" or state[-1][2] != "k":
        return None
    top = state[-1]
    node = top[1]
    if node >= 0 and nodes[node][0] != "any_object":
        return None
    return (*state[:-1], ("obj", node, "k", frozenset(), ""))
