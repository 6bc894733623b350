"""Byte-level BPE tokenizers trained locally (no hub), with special tokens and a chat template."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from aifab.core.errors import InvalidInputError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

PAD, BOS, EOS, UNK = "<|pad|>", "<|bos|>", "<|eos|>", "<|unk|>"

#: Ids 0..6 in this order: pad=0, bos=1, eos=2 match the causal-lm config defaults.
DEFAULT_SPECIAL_TOKENS: tuple[str, ...] = (
    PAD,
    BOS,
    EOS,
    UNK,
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
)

#: Each message is ``<|role|>\ncontent<|eos|>\n``; a generation prompt opens the assistant turn.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\n' + message['content'] + '<|eos|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)

#: How text is cut into pieces before BPE merges (merges never cross a piece boundary).
#: ``words``: GPT-2's rule, a word keeps its leading space and digits run together, so ``GB``
#: after a space and after a quote are different tokens. ``isolated``: every whitespace
#: character, punctuation mark and digit is a piece of its own, so a value (a country code, a
#: number, a name) is the same tokens wherever it appears: copying it from a request into a
#: JSON call is a plain copy of token ids. About a third more tokens on JSON-heavy text.
PreTokenizer = Literal["words", "isolated"]


def train_bpe_tokenizer(
    texts: Iterable[str],
    vocab_size: int = 512,
    special_tokens: Sequence[str] = DEFAULT_SPECIAL_TOKENS,
    *,
    min_frequency: int = 2,
    chat_template: str = CHAT_TEMPLATE,
    pre_tokenizer: PreTokenizer = "words",
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer on ``texts``.

    Byte-level BPE never needs the unknown token: every string encodes and decodes back
    exactly. No BOS/EOS is added automatically; training code adds them where it wants them.

    Args:
        texts: The training corpus (any iterable of strings; consumed once).
        vocab_size: Target vocabulary size, special tokens and the 256 bytes included.
        special_tokens: Added first, in order; the first four are used as pad, bos, eos, unk.
        min_frequency: Pairs seen fewer times are not merged.
        chat_template: Jinja chat template (default: ``<|user|>``/``<|assistant|>`` markers).
        pre_tokenizer: ``words`` (GPT-2's split) or ``isolated`` (whitespace, punctuation
            and digits one piece each, so values tokenize the same in any context).

    Returns:
        A ``PreTrainedTokenizerFast``; save it with ``save_pretrained``.

    Raises:
        InvalidInputError: Too few special tokens, or a vocabulary too small to hold the
            special tokens and the byte alphabet.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = list(special_tokens)
    if len(specials) < 4 or len(set(specials)) != len(specials):
        raise InvalidInputError(
            "special_tokens: need at least 4 distinct tokens (pad, bos, eos, unk)"
        )
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    if vocab_size < len(alphabet) + len(specials):
        raise InvalidInputError(
            f"vocab_size: {vocab_size} is too small; byte-level BPE needs at least "
            f"{len(alphabet) + len(specials)} (256 bytes + {len(specials)} special tokens)"
        )
    tok = Tokenizer(models.BPE(unk_token=specials[3]))
    tok.pre_tokenizer = _pre_tokenizer(pre_tokenizer)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=specials,
        initial_alphabet=alphabet,
        show_progress=False,
    )
    tok.train_from_iterator(iter(texts), trainer=trainer)
    pad, bos, eos, unk = specials[:4]
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=pad,
        bos_token=bos,
        eos_token=eos,
        unk_token=unk,
        additional_special_tokens=specials[4:],
        chat_template=chat_template,
        clean_up_tokenization_spaces=False,
    )


def _pre_tokenizer(kind: PreTokenizer) -> Any:
    from tokenizers import Regex, pre_tokenizers

    if kind == "words":
        return pre_tokenizers.ByteLevel(add_prefix_space=False)
    if kind == "isolated":
        return pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(r"\s"), behavior="isolated"),
                pre_tokenizers.Punctuation(behavior="isolated"),
                pre_tokenizers.Digits(individual_digits=True),
                # use_regex=False: the pieces are final, ByteLevel only maps bytes to symbols
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    raise InvalidInputError(f"pre_tokenizer: {kind!r} is not one of words, isolated")


def load_tokenizer(directory: Path | str) -> PreTrainedTokenizerFast:
    """Load a tokenizer saved with ``save_pretrained`` from a local directory (never the hub).

    Raises:
        InvalidInputError: The directory holds no ``tokenizer.json``.
    """
    from transformers import PreTrainedTokenizerFast

    path = Path(directory)
    if not (path / "tokenizer.json").is_file():
        raise InvalidInputError(f"{path} holds no tokenizer: tokenizer.json not found")
    tokenizer: PreTrainedTokenizerFast = PreTrainedTokenizerFast.from_pretrained(
        str(path), local_files_only=True
    )
    return tokenizer
