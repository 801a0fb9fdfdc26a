"""The fences of the docs' examples: what each says about running it."""

from __future__ import annotations

import pytest

from tests.doc_examples import Example, moved, parse, parse_info


@pytest.mark.parametrize(
    ("info", "attrs"),
    [
        ("", {}),
        ('expect="a b"', {"expect": "a b"}),
        ('norun="no grpcurl here" ', {"norun": "no grpcurl here"}),
        ('cluster="configs/x.yaml" expect="^ok$"', {"cluster": "configs/x.yaml", "expect": "^ok$"}),
        ('expect="\\d+ \\[DONE\\]"', {"expect": "\\d+ \\[DONE\\]"}),
        ("timeout=30 expect=x", {"timeout": "30", "expect": "x"}),
        ("expect='a \"b\"'", {"expect": 'a "b"'}),
        ('expect="\\A200\\n"', {"expect": "\\A200\\n"}),  # (as written: no unescaping)
    ],
)
def test_a_fence_says_how_it_runs(info: str, attrs: dict[str, str]) -> None:
    assert parse_info(info) == attrs


@pytest.mark.parametrize(
    "info", ["expects=x", "norun", 'excpet="x"', "--skip", 'expect="open', 'expect="x"y']
)
def test_a_typo_in_a_fence_is_an_error_not_an_example_turned_off(info: str) -> None:
    with pytest.raises(ValueError, match="fence attribute"):
        parse_info(info)


def test_blocks_are_found_in_order_with_their_lines() -> None:
    text = 'intro\n```bash expect="x"\necho x\n```\ntext\n```yaml\na: 1\n```\n```\nplain\n```\n'
    got = parse(text, "doc.md")
    assert got == [
        Example("doc.md", 2, "bash", "echo x\n", {"expect": "x"}),
        Example("doc.md", 6, "yaml", "a: 1\n", {}),
        Example("doc.md", 9, "", "plain\n", {}),
    ]
    assert [e.runs for e in got] == [True, False, False]
    assert got[0].cluster == "configs/local.yaml"


def test_a_bad_fence_is_named_by_its_place() -> None:
    with pytest.raises(ValueError, match=r"doc\.md:3: fence attribute 'expcet="):
        parse('text\n\n```bash expcet="x"\necho\n```\n', "doc.md")


@pytest.mark.parametrize("fence", ["  ```bash", "~~~bash", "   ~~~"])
def test_a_fence_that_would_not_be_counted_is_an_error(fence: str) -> None:
    with pytest.raises(ValueError, match=r"d\.md:2: a fence not at the start"):
        parse(f"- item\n{fence}\necho\n", "d.md")


def test_a_fence_never_closed_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"doc\.md:1"):
        parse("```bash\necho\n", "doc.md")


def test_a_norun_example_does_not_run() -> None:
    assert not parse('```python norun="needs a GPU node"\nx\n```\n', "d.md")[0].runs


@pytest.mark.parametrize(
    ("code", "offset", "out"),
    [
        ("http://127.0.0.1:8080/v1", 7, "http://127.0.0.1:8087/v1"),
        ("localhost:8080/v1/x", 10, "localhost:8090/v1/x"),
        ('grpc.insecure_channel("127.0.0.1:50051")', 3, 'grpc.insecure_channel("127.0.0.1:50054")'),
        ("port 8080 and :80801 and :18080", 5, "port 8080 and :80801 and :18080"),
    ],
)
def test_the_gateway_ports_move_with_the_cluster(code: str, offset: int, out: str) -> None:
    assert moved(code, offset) == out
