"""The seed scenarios' data, shared by the engine-level and the HTTP-level replays.

``tests/memcore/extraction/test_seed_scenarios.py`` runs them through ``run_extraction``;
``tests/serve_apps/test_seed_scenarios_http.py`` through the ingest API. Turns are
``(role, text)`` pairs; each test module builds its own events from them.
"""

from __future__ import annotations

from datetime import UTC, datetime

from testkit.scripted_llm import tool_call

MAY30 = datetime(2025, 5, 30, 18, 0, tzinfo=UTC)
JUN16 = datetime(2025, 6, 16, 18, 0, tzinfo=UTC)
MAR1 = datetime(2025, 3, 1, 9, tzinfo=UTC)
DEC2 = datetime(2025, 12, 2, 9, tzinfo=UTC)

# seven short stories, then a weekly writing goal
STORIES = "The user has completed seven short stories."
GOAL = "The user is writing a new short story and aims to write 500 words per week."
STORIES_TURNS = [("user", "I just finished my seventh short story, so that's seven done!"),
                 ("assistant", "Seven completed stories is a real milestone.")]
GOAL_TURNS = [("user", "I started a new story and I'm aiming for 500 words a week."),
              ("assistant", "A steady weekly goal works well.")]

# Go 1.21 -> 1.23
GO21, GO23 = "The project requires Go 1.21.", "The project requires Go 1.23."
GO_AFTER_UPDATE = [  # (policy, the entries left after "1.21" is updated to "1.23")
    ("merge_similar", [GO23]),
    ("append_only", [GO21, GO23]),
    ("preserve_history", [GO21, GO23]),
]

# changed facts that look alike
LOOKALIKES = [
    ("Alice manages Bob.", "Bob manages Alice."),
    ("The newsletter is published every Wednesday.", "The newsletter is no longer published every Wednesday."),
]

# enrichment of the same event
VISIT = {"memory": "Alice visited Bob on December 1st, 2025.", "memory_kind": "episode",
         "event_time": "2025-12-01T00:00:00Z", "participants": ["Alice", "Bob"]}
VISIT_4PM = {**VISIT, "memory": "Alice visited Bob at 4pm on December 1st, 2025.",
             "event_time": "2025-12-01T16:00:00Z"}

# assistant-only information
ASSISTANT_TURNS = [
    ("user", "Is there research on mindfulness and sleep?"),
    ("assistant", "Yes. One study on mindfulness and sleep had 38 participants, who slept better after 6 weeks."),
    ("user", "Fun. Also, can you suggest a classic Soviet cartoon?"),
    ("assistant", "Try Nu, pogodi!, a Soviet animated series about a wolf chasing a hare."),
]
ORDINARY = [tool_call("memory_add", {"memory": "The user is interested in research on mindfulness and sleep."}),
            tool_call("memory_add", {"memory": "The user is interested in classic Soviet cartoons."})]
EPISODES = [
    tool_call("assistant_episode", {"pair": 1, "memory": "The user asked about mindfulness and sleep research; "
                                    "the assistant cited a study with 38 participants."}),
    tool_call("assistant_episode", {"pair": 2, "memory": "The user asked for a classic Soviet cartoon; the "
                                    "assistant suggested Nu, pogodi!, about a wolf chasing a hare."}),
]
QUESTIONS = [("How many participants were in the mindfulness study?", "38"),
             ("What was the Soviet cartoon the assistant suggested?", "Nu, pogodi!")]
