from __future__ import annotations

from memcore import text


def test_tokenize_english_and_cjk() -> None:
    assert text.tokenize("我喜欢Go 1.21, really!") == ["我", "喜", "欢", "go", "1.21", "really"]
    assert text.tokenize("Don't STOP") == ["don't", "stop"]
    assert text.tokenize("") == []


def test_normalize_collapses_space_and_case() -> None:
    assert text.normalize("  Hello\t\nWORLD  ") == "hello world"
    assert text.normalize("ｆｕｌｌｗｉｄｔｈ") == "fullwidth"


def test_jaccard() -> None:
    assert text.jaccard("a b c", "a b c") == 1.0
    assert text.jaccard("a b", "c d") == 0.0
    assert abs(text.jaccard("a b c d", "a b c e") - 3 / 5) < 1e-9
    assert text.jaccard("", "") == 1.0


def test_numbers_and_negations() -> None:
    assert text.numbers("Go 1.21 upgraded to 1.23 at 4pm, 1,000 users") == ["1.21", "1.23", "4", "1000"]
    assert text.negations("It is no longer published every Wednesday") == ["no"]
    assert "not" in text.negations("I do not like tea")
    assert text.negations("I like tea") == []


def test_change_markers() -> None:
    assert text.change_markers("The user now uses Go 1.23") == {"now"}
    assert "no longer" in text.change_markers("It is no longer published")
    assert text.change_markers("nowhere to be seen") == set()


def test_coverage_and_order() -> None:
    old = "Alice visited Bob on December 1st"
    new = "Alice visited Bob on December 1st at 4pm"
    assert text.coverage(old, new) == 1.0
    assert text.in_order(old, new)
    assert not text.in_order("Alice manages Bob", "Bob manages Alice")
