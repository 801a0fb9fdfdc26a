"""A small deterministic tokenizer for the sim engine: no files, stable across processes.

Text is split into pieces (a word with its leading whitespace, a digit, a punctuation mark, or a
run of whitespace). A fixed vocabulary of plain English words (" word", with the leading space)
has ids 4.. ; any other piece hashes (crc32, never the salted `hash()`) into the rest of the
vocabulary. Generated tokens are drawn from the word ids only, so output reads like words.

A few words with a two-byte character (SPLIT_WORDS) are two tokens each, at the top of the
vocabulary, that split the character's bytes as byte-level BPE does; the sim generates them only
where configured (SimConfig.multibyte_every). `decode` joins bytes for them.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable, Sequence
from typing import Any

from shardgate.v1.params import Message as ChatMessage
from shardgate.v1.params import Template

PAD_ID = 0
BOS_ID = 1
EOS_ID = 2
UNK_ID = 3
FIRST_WORD_ID = 4
HASHED_END = 32000  # hashed pieces take the ids up to here; the split words' tokens follow
SPLIT_WORDS = ("café", "naïve", "señor", "crème", "über", "façade")
VOCAB_SIZE = HASHED_END + 2 * len(SPLIT_WORDS)

_WORD_LIST = """
the of and to a in is was for on that with as by at from it this be are or an have not which
they has but had his her were their you one all we can there been if more when will would who
so no she other its may these about into than them only time some could new our two then do
any first like my now over such very also up just out what most made after people me because
years world day way back year good work life man many state well know see long get great make
must where those little through place much old right still before never same here part being
state house under high small large while should world home last might another found city water
without each both between around again down three country come thought between always world
light night school word story house children family land river tree road sea sky sun moon star
fire wind rain snow stone hand eye head face heart mind voice door window table book paper
letter name number line point group order form case fact idea money power war peace law art
music song color colour field garden forest mountain island valley hill village town street
market bridge church tower castle king queen prince friend mother father brother sister son
daughter woman girl boy child dog cat horse bird fish bread milk tea coffee wine apple ship
boat train car wheel horse morning evening summer winter spring autumn week month hour minute
moment question answer reason problem system change history nature science language thing
simple quiet gentle bright dark warm cold soft hard quick slow early late young open close
deep wide free full empty happy sad strong weak clear true real whole short tall heavy light
walk run read write speak listen look watch wait stay leave bring carry hold follow begin
start stop turn move live grow learn teach build keep give take find tell ask feel seem become
leave call try need want show hear play believe remember understand happen include continue
together often later soon already almost always perhaps across along behind beyond during
"""
# Unique, in first-seen order, so ids never depend on anything but this list.
WORDS: tuple[str, ...] = tuple(dict.fromkeys(_WORD_LIST.split()))

_PIECE = re.compile(r"\s*[A-Za-z]+|\s*\d|\s*[^\sA-Za-z\d]|\s+")
_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"


class SimTokenizer:
    """Deterministic text <-> ids; `decode_token` strings are cached."""

    vocab_size = VOCAB_SIZE

    def __init__(self) -> None:
        self.word_ids: tuple[int, ...] = tuple(range(FIRST_WORD_ID, FIRST_WORD_ID + len(WORDS)))
        # Index i of word_texts is the text of word id FIRST_WORD_ID + i.
        self.word_texts: tuple[str, ...] = tuple(" " + w for w in WORDS)
        self._piece_to_id = {t: FIRST_WORD_ID + i for i, t in enumerate(self.word_texts)}
        self._hashed_base = FIRST_WORD_ID + len(WORDS)
        self._hashed_span = HASHED_END - self._hashed_base
        self._decoded: dict[int, str] = {}
        # The bytes of each split word's two tokens: the first ends with the character's lead
        # byte. Split word j is ids HASHED_END + 2j (first) and HASHED_END + 2j + 1.
        self._split_bytes: dict[int, bytes] = {}
        for j, word in enumerate(SPLIT_WORDS):
            raw = (" " + word).encode()
            lead = next(i for i, b in enumerate(raw) if b >= 0x80) + 1
            self._split_bytes[HASHED_END + 2 * j] = raw[:lead]
            self._split_bytes[HASHED_END + 2 * j + 1] = raw[lead:]
        self.num_split_words = len(SPLIT_WORDS)

    @property
    def eos_id(self) -> int:
        return EOS_ID

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        """(The sim's prompts take no special tokens: `add_special_tokens` changes nothing,
        and a request that asks for what it would change is refused, see prompts.py.)"""
        lookup = self._piece_to_id.get
        base, span = self._hashed_base, self._hashed_span
        out: list[int] = []
        for piece in _PIECE.findall(text):
            tid = lookup(piece)
            if tid is None:
                tid = base + zlib.crc32(piece.encode()) % span
            out.append(tid)
        return out

    @staticmethod
    def split_first(j: int) -> int:
        """The first token of split word j."""
        return HASHED_END + 2 * j

    @staticmethod
    def is_split_first(token_id: int) -> bool:
        return token_id >= HASHED_END and (token_id - HASHED_END) % 2 == 0

    def split_word(self, first_id: int) -> str:
        """The text of a split word (" café"), given its first token."""
        return " " + SPLIT_WORDS[(first_id - HASHED_END) // 2]

    def streamed_text(self, token_ids: Sequence[int]) -> str:
        """The text a stream of these tokens has emitted: a split word's text comes with its
        second token, so a first token at the end has none yet."""
        if token_ids and self.is_split_first(token_ids[-1]):
            token_ids = token_ids[:-1]
        return self.decode(token_ids)

    def decode_token(self, token_id: int) -> str:
        i = token_id - FIRST_WORD_ID
        if 0 <= i < len(self.word_texts):
            return self.word_texts[i]
        raw = self._split_bytes.get(token_id)
        if raw is not None:
            return raw.decode(errors="replace")
        text = self._decoded.get(token_id)
        if text is None:
            text = self._pseudo_word(token_id)
            if len(self._decoded) < 65536:
                self._decoded[token_id] = text
        return text

    def decode(self, token_ids: Iterable[int]) -> str:
        ids = list(token_ids)
        if not any(t >= HASHED_END for t in ids):
            return "".join(self.decode_token(t) for t in ids)
        split = self._split_bytes.get
        raw = b"".join(split(t) or self.decode_token(t).encode() for t in ids)
        return raw.decode(errors="replace")

    def encode_chat(
        self,
        messages: Sequence[ChatMessage],
        tools: list[dict[str, Any]] | None = None,
        template: Template | None = None,
        add_special_tokens: bool = False,
    ) -> list[int]:
        """(`tools`, `template`: the sim's engine takes none, see its capabilities.)"""
        return self.encode(self.apply_chat_template(messages))

    def apply_chat_template(self, messages: Sequence[ChatMessage]) -> str:
        parts = [f"<|{m.role}|>\n{m.content}\n" for m in messages]
        parts.append("<|assistant|>\n")
        return "".join(parts)

    @staticmethod
    def _pseudo_word(token_id: int) -> str:
        """A pronounceable stand-in for a hashed piece, e.g. " bokasu"; specials decode to ""."""
        if not 0 <= token_id < VOCAB_SIZE or token_id < FIRST_WORD_ID:
            return ""
        n = token_id
        syllables: list[str] = []
        radix = len(_CONSONANTS) * len(_VOWELS)
        while True:
            n, s = divmod(n, radix)
            syllables.append(_CONSONANTS[s // len(_VOWELS)] + _VOWELS[s % len(_VOWELS)])
            if n == 0:
                break
        return " " + "".join(syllables)
