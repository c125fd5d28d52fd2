"""The demo agent's thresholds, defined once: the server's defaults (voice.config.ServeConfig),
`diffvoice eval-model`'s and the rules' own (agent.clarify, agent.paraphrase) are these."""

# clarify (agent.clarify): a reply whose first block was committed with a lowest token
# probability below this is replaced by a question. Chosen on the template and dialogue held-out
# sets of an intermediate checkpoint, never on the independent set (agent/clarify.py).
CLARIFY_BELOW = 0.5
# paraphrase snapping (agent.paraphrase): cosine similarity at or above which a caller's message
# is heard as its nearest bank question; chosen on the template held-out and dialogue sets
# (0.5-0.8 tried; models/receptionist-tiny/EXPERIMENTS.md), not on the independent set
PARAPHRASE_SIMILARITY = 0.7
# intent snapping: the intent head's probability at or above which a caller's message is heard
# as the most similar training question of that intent stating the same service and day; chosen
# on the template held-out set (intent right on 97.5% of its questions at or above 0.5, 95% of
# them covered), not on the independent set
INTENT_PROBABILITY = 0.5
