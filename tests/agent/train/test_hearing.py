"""eval-model's split of a spoken set by how it was heard (agent.train.hearing)."""

import random

from diffvoice.agent.train.evaluate import Reply
from diffvoice.agent.train.hearing import heard_words, hearing
from diffvoice.agent.train.independent import load_independent
from diffvoice.latency_bench.wer import edit_distance


def reply(template: str, heard: str, correct: bool) -> Reply:
    return Reply(heard, 0, "x", "fact", template, "", "", "", correct, correct, True, False,
                 False, True, correct, 1, 1, None, None, 0.0)


def test_spelling_a_listener_cannot_hear_is_not_an_error():
    assert heard_words("whats your e-mail, ok?") == ["whats", "your", "e", "mail", "okay"]
    assert heard_words("At 9 A.M. then") == heard_words("at 9 am then")
    assert heard_words("What's") == ["whats"]


def test_hand_counted_split():
    said = {0: "whats your address", 1: "do you take apple pay", 2: "can i book for 2 pm"}
    replies = [
        reply("spoken:0:v1:asr", "What's your address?", True),   # heard, right
        reply("spoken:1:v1:asr", "Do you take apple pie?", False),  # 1 of 5 words off, wrong
        reply("spoken:2:v2:asr", "Can I book for 2pm?", False),     # heard (letters equal), wrong
        reply("spoken:1:v2:asr", "you take apple pay", True),       # 1 deletion, right
    ]
    h = hearing(replies, said)
    assert h["n"] == 4
    # edits 0 + 1 + 2 ("2pm" for "2 pm": one substitution, one deletion) + 1 over 3 + 5 + 6 + 5
    assert abs(h["wer"] - 4 / 19) < 1e-12
    assert h["heard_exactly_rate"] == 0.5
    assert h["accuracy_heard_exactly"] == 0.5 and h["accuracy_misheard"] == 0.5
    v1, v2 = h["per_voice"]["v1"], h["per_voice"]["v2"]
    assert (v1["n"], v1["accuracy_heard_exactly"], v1["accuracy_misheard"]) == (2, 1.0, 0.0)
    assert (v2["n"], v2["accuracy_heard_exactly"], v2["accuracy_misheard"]) == (2, 0.0, 1.0)


def test_split_matches_a_direct_count_on_random_transcripts():
    items = load_independent()
    said = {item["id"]: item["q"] for item in items}
    rng = random.Random(7)
    replies, rows = [], []
    for _ in range(200):
        item = rng.choice(items)
        words = item["q"].split()
        if rng.random() < 0.5:  # mishear: drop or swap a word
            i = rng.randrange(len(words))
            words = words[:i] + ([] if rng.random() < 0.5 else ["zzz"]) + words[i + 1:]
        voice, ok = rng.choice(["a", "b", "c"]), rng.random() < 0.7
        replies.append(reply(f"spoken:{item['id']}:{voice}:asr", " ".join(words).upper(), ok))
        ref, hyp = heard_words(item["q"]), heard_words(" ".join(words))
        rows.append((voice, edit_distance(ref, hyp), len(ref), "".join(ref) == "".join(hyp), ok))
    h = hearing(replies, said)
    assert abs(h["wer"] - sum(r[1] for r in rows) / sum(r[2] for r in rows)) < 1e-12
    exact = [r[4] for r in rows if r[3]]
    assert h["heard_exactly_rate"] == len(exact) / len(rows)
    assert h["accuracy_heard_exactly"] == sum(exact) / len(exact)
    for voice in "abc":
        mine = [r for r in rows if r[0] == voice]
        assert h["per_voice"][voice]["n"] == len(mine)
        off = [r[4] for r in mine if not r[3]]
        assert h["per_voice"][voice]["accuracy_misheard"] == sum(off) / len(off)
