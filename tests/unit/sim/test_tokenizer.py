from __future__ import annotations

import pytest

from engine_sidecar.backend import ChatMessage
from engine_sidecar.backends.sim.tokenizer import (
    EOS_ID,
    FIRST_WORD_ID,
    VOCAB_SIZE,
    WORDS,
    SimTokenizer,
)

TOK = SimTokenizer()


@pytest.mark.parametrize(
    "text",
    [
        " the",
        " the world is a great place",
        " water river sea sky sun moon star",
        " " + " ".join(WORDS[:50]),
    ],
)
def test_word_pieces_round_trip(text: str) -> None:
    ids = TOK.encode(text)
    assert all(FIRST_WORD_ID <= i < FIRST_WORD_ID + len(WORDS) for i in ids)
    assert "".join(TOK.decode_token(i) for i in ids) == text
    assert TOK.decode(ids) == text


@pytest.mark.parametrize(
    ("text", "pieces"),
    [
        ("hello world", 2),  # "hello" (no leading space, not a word id) and " world"
        (" 2024!", 5),  # " 2", "0", "2", "4", "!"
        ("a  \n", 2),  # "a", "  \n"
        ("", 0),
        ("<|user|>\nhi\n", 7),  # "<", "|", "user", "|", ">", "\nhi", "\n"
    ],
)
def test_pieces(text: str, pieces: int) -> None:
    assert len(TOK.encode(text)) == pieces


def test_deterministic_across_instances_and_stable() -> None:
    text = "Hello, world! The year 1999 was strange: zxqv."
    a, b = SimTokenizer().encode(text), SimTokenizer().encode(text)
    assert a == b
    assert all(4 <= i < VOCAB_SIZE for i in a)
    # crc32, not Python's salted hash(): these ids never change between processes.
    assert TOK.encode("zxqv") == [19660]
    assert TOK.encode("Hello") == [28808]
    assert TOK.encode(" world") == [FIRST_WORD_ID + WORDS.index("world")]


def test_other_pieces_hash_outside_the_words() -> None:
    for piece in ["Hello", "zxqv", "!", "7", " \n", "ü"]:
        (tid,) = TOK.encode(piece)
        assert FIRST_WORD_ID + len(WORDS) <= tid < VOCAB_SIZE
        word = TOK.decode_token(tid)
        assert word.startswith(" ") and word[1:].isalpha()
        assert word == SimTokenizer().decode_token(tid)


@pytest.mark.parametrize("tid", [0, 1, 2, 3, -1, VOCAB_SIZE])
def test_specials_and_out_of_range_decode_to_nothing(tid: int) -> None:
    assert TOK.decode_token(tid) == ""


def test_eos_and_chat_template() -> None:
    assert TOK.eos_id == EOS_ID == 2
    text = TOK.apply_chat_template((ChatMessage("system", "Be brief."), ChatMessage("user", "Hi")))
    assert text == "<|system|>\nBe brief.\n<|user|>\nHi\n<|assistant|>\n"
    assert TOK.apply_chat_template(()) == "<|assistant|>\n"


def test_words_are_unique_and_plain() -> None:
    assert len(WORDS) == len(set(WORDS)) >= 300
    assert all(w.isalpha() and w.islower() for w in WORDS)


def test_split_words_decode_as_bytes_and_stream_with_their_second_token() -> None:
    from engine_sidecar.backends.sim.tokenizer import SPLIT_WORDS

    word = TOK.encode(" the")
    for j, text in enumerate(SPLIT_WORDS):
        first = TOK.split_first(j)
        assert TOK.is_split_first(first) and not TOK.is_split_first(first + 1)
        assert first + 1 < VOCAB_SIZE
        assert TOK.split_word(first) == " " + text
        assert TOK.decode([*word, first, first + 1]) == " the " + text
        assert TOK.decode([*word, first]).endswith("\ufffd")  # its character is incomplete
        assert TOK.streamed_text([*word, first]) == " the"
        assert TOK.streamed_text([*word, first, first + 1]) == " the " + text
