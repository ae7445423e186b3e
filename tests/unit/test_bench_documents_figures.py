"""The documents scenario's texts and rows (pure), and the option that sizes it."""

from __future__ import annotations

import argparse

from embedstream.tools.bench.documents_figures import (
    EDIT_MARK,
    DocumentPass,
    document_rows,
    make_documents,
    plain_texts,
    share,
)
from embedstream.tools.bench.options import ALIASES, SCENARIOS, add_cli_arguments, sizes_from_args


def one_pass(name: str, items: int, seconds: float, tokens: int, ended: int = 10) -> DocumentPass:
    return DocumentPass(name, 10, items, ended, items, tokens, 3, seconds, 1.0, 0.5)


def parse(*args: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="embedstream bench", exit_on_error=False)
    add_cli_arguments(parser)
    return parser.parse_args(list(args))


def test_the_edit_pass_changes_one_word_in_the_chosen_share_of_documents() -> None:
    first, second = make_documents(20, 5, 0.1, seed=3)
    changed = [d for d, (a, b) in enumerate(zip(first, second, strict=True)) if a != b]
    assert len(changed) == 2
    for d in changed:
        assert second[d].count(EDIT_MARK) == 1
        assert len(second[d].split()) == len(first[d].split())
        assert second[d].count("\n\n") == first[d].count("\n\n") == 4
    assert make_documents(20, 5, 0.1, seed=3) == (first, second)  # seeded


def test_plain_texts_are_distinct() -> None:
    texts = plain_texts(50, seed=1)
    assert len(set(texts)) == 50


def test_rows_give_the_edit_share_of_tokens_and_chunks_per_s_beside_items_per_s() -> None:
    passes = [
        one_pass("first", 200, 2.0, 40_000),
        one_pass("edited", 200, 1.0, 400),
        one_pass("plain", 200, 4.0, 40_000),
    ]
    first, edited, plain = document_rows(passes, 10, 20, 0.1, "Kafka at x")
    assert (first.items_per_s, edited.items_per_s, plain.items_per_s) == (100, 200, 50)
    assert "10% edited, tokens 1.0% of the first pass" in edited.scenario
    assert "chunks/s 2.00x items/s" in plain.scenario
    assert {first.kind, edited.kind, plain.kind} == {"documents"}
    assert "40,000 tokens sent" in first.note and first.failed == 0


def test_a_pass_that_did_not_finish_counts_its_missing_events_as_failed() -> None:
    passes = [one_pass("first", 0, 1.0, 0, ended=7), one_pass("edited", 0, 1.0, 0),
              one_pass("plain", 0, 0.0, 0)]  # fmt: skip
    first, edited, plain = document_rows(passes, 10, 20, 0.1, "b")
    assert first.failed == 3
    assert "tokens 0.0% of" in edited.scenario  # no division by a zero first pass
    assert "0.00x" in plain.scenario and share(1, 0) == 0.0


def test_documents_is_a_scenario_of_its_own_sized_by_docs() -> None:
    assert "documents" in SCENARIOS and "documents" not in ALIASES["kafka"]
    ns = parse("--scenarios", "documents", "--docs", "7")
    assert ns.scenarios == ("documents",) and sizes_from_args(ns).docs == 7
    assert sizes_from_args(parse("--quick")).docs == 50
    assert sizes_from_args(parse()).docs == 1_000
