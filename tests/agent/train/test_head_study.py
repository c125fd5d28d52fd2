"""The head study's measure (agent.train.head_study): what it counts as right, and a voice split
that never measures on a voice it fitted."""

from __future__ import annotations

import torch

from diffvoice.agent.sentence_encoder import IntentHead
from diffvoice.agent.train.head_study import _voice_split, score


def test_score_counts_right_only_at_or_above_the_threshold():
    # two intents along two axes; a third point halfway is unsure (p = 0.5 exactly is covered)
    head = IntentHead(("a", "b"), torch.eye(2), torch.zeros(2), scale=20.0)
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.7071, 0.7071], [1.0, 0.0]])
    got = score(head, x, ["a", "b", "b", "b"])
    # row 0 right and sure; row 1 right and sure; row 2 is a tie (top "a", p 0.5): covered, wrong;
    # row 3 sure and wrong
    assert got == {"n": 4, "right": 0.5, "top1": 0.5, "covered": 1.0}
    strict = score(head, x, ["a", "b", "b", "b"], threshold=0.9)
    assert strict["covered"] == 0.75 and strict["right"] == 0.5


def test_voice_split_is_disjoint_and_covers_every_voice():
    rows = [{"voice": f"v{i % 7}"} for i in range(50)]
    for seed in range(5):
        fit, dev = _voice_split(rows, seed)
        assert fit.isdisjoint(dev) and fit | dev == {f"v{i}" for i in range(7)}
        assert len(fit) == 3 and len(dev) == 4
    assert _voice_split(rows, 0) == _voice_split(rows, 0)
