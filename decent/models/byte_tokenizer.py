"""A byte-level tokenizer built locally, for the tiny test models.

The tiny models (``tiny-llama``, ``tiny-opt``, ``tiny-moe``) must work without any download,
so their tokenizer cannot come from the hub either. A byte vocabulary needs no training and
round-trips any UTF-8 text: token id ``b`` is byte ``b`` (0–255), followed by four special
tokens. It is built with the ``tokenizers`` library and wrapped in
:class:`transformers.PreTrainedTokenizerFast`, so callers use it exactly like a hub tokenizer
(``tok(texts, padding=True, return_tensors="pt")``, ``tok.decode(ids)``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

NUM_BYTES = 256
PAD_TOKEN, EOS_TOKEN, BOS_TOKEN, UNK_TOKEN = "<pad>", "<eos>", "<bos>", "<unk>"
SPECIAL_TOKENS = (PAD_TOKEN, EOS_TOKEN, BOS_TOKEN, UNK_TOKEN)
PAD_ID, EOS_ID, BOS_ID, UNK_ID = range(NUM_BYTES, NUM_BYTES + len(SPECIAL_TOKENS))
VOCAB_SIZE = NUM_BYTES + len(SPECIAL_TOKENS)  # 260: the tiny models' embedding rows


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from bytes to printable characters.

    The ``ByteLevel`` pre-tokenizer of ``tokenizers`` rewrites every input byte as one of these
    characters, so the vocabulary must be keyed by them; the ``ByteLevel`` decoder maps them back.
    """
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    mapping = {b: chr(b) for b in printable}
    extra = 0
    for b in range(NUM_BYTES):
        if b not in mapping:
            mapping[b] = chr(NUM_BYTES + extra)
            extra += 1
    return mapping


def byte_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level tokenizer: ids 0–255 are the UTF-8 bytes, then ``<pad> <eos> <bos> <unk>``.

    No BOS/EOS is added automatically (like SmolLM2's tokenizer); padding is on the right, and
    ``<unk>`` is never produced since every byte has an id.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {char: b for b, char in _bytes_to_unicode().items()}
    vocab.update({tok: NUM_BYTES + i for i, tok in enumerate(SPECIAL_TOKENS)})
    # BPE without merges = one token per byte.
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(list(SPECIAL_TOKENS))
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token=PAD_TOKEN,
        eos_token=EOS_TOKEN,
        bos_token=BOS_TOKEN,
        unk_token=UNK_TOKEN,
    )
    tokenizer.padding_side = "right"
    return tokenizer
