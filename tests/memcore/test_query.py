from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memcore.query import content_query, query_dates, query_names


def test_content_query_drops_stop_and_question_words() -> None:
    assert content_query("What did Caroline research?") == "Caroline research"
    assert content_query("When did Melanie paint a sunrise?") == "Melanie paint sunrise"
    assert content_query("What is it?") == "What is it?"  # nothing left: the query as it is
    assert content_query("我喜欢 tea") == "我喜欢 tea"


@pytest.mark.parametrize(("text", "start", "end", "rest"), [
    ("What did Jon do on 7 July, 2023?", datetime(2023, 7, 7), datetime(2023, 7, 8), "What did Jon do?"),
    ("Where was Gina in August 2023?", datetime(2023, 8, 1), datetime(2023, 9, 1), "Where was Gina?"),
    ("What happened October 6, 2022?", datetime(2022, 10, 6), datetime(2022, 10, 7), "What happened?"),
    ("Plans for the 4th of October, 2023", datetime(2023, 10, 4), datetime(2023, 10, 5), "Plans for the"),
    ("Gifts in December 2023?", datetime(2023, 12, 1), datetime(2024, 1, 1), "Gifts?"),
])
def test_query_dates_day_and_month(text: str, start: datetime, end: datetime, rest: str) -> None:
    period, left = query_dates(text)
    assert period == (start.replace(tzinfo=UTC), end.replace(tzinfo=UTC))
    assert left == rest


def test_query_dates_ignores_years_alone_and_falls_back_to_the_month() -> None:
    assert query_dates("What did Jon do in 2023?") == (None, "What did Jon do in 2023?")
    period, _ = query_dates("on 31 February, 2023")  # no such day: the month it names
    assert period == (datetime(2023, 2, 1, tzinfo=UTC), datetime(2023, 3, 1, tzinfo=UTC))
    assert query_dates("no date here") == (None, "no date here")


@pytest.mark.parametrize(("text", "names"), [
    ("What are the names of Andrew's dogs?", {"andrew"}),  # the clitic goes, the question word starts the sentence
    ("What did John attend with his colleagues in March 2023?", {"john"}),  # a date is no name
    ("Hi, I'm planning a trip to Lisbon with Bob. Any tips for Friday?", {"lisbon", "bob"}),  # I'm, Any, Friday
    ("Where did Jean-Luc go?", {"jean-luc"}),
    ("Caroline asked Mel about LGBTQ events", {"mel", "lgbtq"}),  # the first word starts the sentence
    ("what is my sister called", set()),  # lower case names nothing
    ("我的猫叫什么名字", set()),
])
def test_query_names_are_capitalised_words_that_start_no_sentence(text: str, names: set[str]) -> None:
    assert query_names(text) == names
