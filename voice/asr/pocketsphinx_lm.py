"""A small domain language model for the pocketsphinx fallback, built from the receptionist
question generator (agent.data) and the model's fact sheet.

pocketsphinx's bundled general English LM (26 MB) is slow (~0.7x real time here) and rarely right
on synthetic or accented speech. Callers of a receptionist ask a narrow set of questions, so a
bigram LM over those questions decodes several times faster and far more accurately — at the
price of mapping off-topic speech onto in-domain words.

    sentences = domain_sentences(facts_path)   # normalized question strings
    write_arpa(sentences, vocabulary, path)    # ARPA bigram LM, words restricted to `vocabulary`

The bigram is interpolated absolute discounting (D = 0.5) written in ARPA backoff form:
p(w|h) = max(c(h,w) - D, 0) / c(h) + lambda(h) p(w) for seen pairs, alpha(h) p(w) otherwise.
Knows nothing about audio or pipecat.
"""

from __future__ import annotations

import math
import random
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path

DISCOUNT = 0.5
UNIGRAM_FLOOR = 0.1  # pseudo-count for every vocabulary word


def domain_sentences(
    facts_path: str | Path | None = None, n: int = 3000, seed: int = 0
) -> list[str]:
    """Question strings the receptionist model was trained on (plus its held-out phrasings)."""
    from diffvoice.agent.data import DataGenerator, normalize
    from diffvoice.agent.facts import load_facts

    facts = load_facts(facts_path) if facts_path else load_facts()
    generator = DataGenerator(facts)
    rng = random.Random(seed)
    sentences = {normalize(generator.sample_train(rng).question) for _ in range(n)}
    sentences |= {normalize(example.question) for example in generator.eval_set()}
    return sorted(s for s in sentences if s)


def load_dictionary_words(dict_path: str | Path) -> set[str]:
    words = set()
    with open(dict_path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.strip():
                words.add(line.split(maxsplit=1)[0].split("(")[0])
    return words


def bigram_model(
    sentences: Iterable[str], vocabulary: set[str]
) -> tuple[dict[str, float], dict[tuple[str, str], float], dict[str, float]]:
    """log10 unigram probs, log10 bigram probs, log10 backoff weights (ARPA conventions)."""
    unigrams: Counter = Counter()
    bigrams: Counter = Counter()
    for sentence in sentences:
        words = sentence.split()
        if not words or any(w not in vocabulary for w in words):
            continue  # a sentence with a word pocketsphinx cannot pronounce is dropped
        tokens = ["<s>", *words, "</s>"]
        unigrams.update(tokens[1:])
        bigrams.update(zip(tokens[:-1], tokens[1:], strict=False))
    if not bigrams:
        raise ValueError("no usable sentences for the language model")
    vocab = sorted({w for w in unigrams} - {"</s>"})
    total = sum(unigrams.values()) + UNIGRAM_FLOOR * (len(vocab) + 1)
    p_uni = {w: (unigrams[w] + UNIGRAM_FLOOR) / total for w in [*vocab, "</s>"]}

    followers: dict[str, dict[str, int]] = defaultdict(dict)
    for (h, w), c in bigrams.items():
        followers[h][w] = c
    log_bigram: dict[tuple[str, str], float] = {}
    log_backoff: dict[str, float] = {}
    for h, nexts in followers.items():
        c_h = sum(nexts.values())
        lam = DISCOUNT * len(nexts) / c_h
        listed = 0.0
        listed_uni = 0.0
        for w, c in nexts.items():
            p = max(c - DISCOUNT, 0.0) / c_h + lam * p_uni[w]
            log_bigram[(h, w)] = math.log10(p)
            listed += p
            listed_uni += p_uni[w]
        alpha = (1.0 - listed) / max(1.0 - listed_uni, 1e-12)
        log_backoff[h] = math.log10(max(alpha, 1e-12))
    log_uni = {w: math.log10(p) for w, p in p_uni.items()}
    return log_uni, log_bigram, log_backoff


def write_arpa(sentences: Iterable[str], vocabulary: set[str], path: str | Path) -> Path:
    log_uni, log_bigram, log_backoff = bigram_model(sentences, vocabulary)
    path = Path(path)
    lines = [
        "\\data\\",
        f"ngram 1={len(log_uni) + 1}",
        f"ngram 2={len(log_bigram)}",
        "",
        "\\1-grams:",
    ]
    lines.append(f"-99.0000 <s> {log_backoff.get('<s>', 0.0):.4f}")
    for w, lp in sorted(log_uni.items()):
        backoff = f" {log_backoff[w]:.4f}" if w in log_backoff else ""
        lines.append(f"{lp:.4f} {w}{backoff}")
    lines += ["", "\\2-grams:"]
    lines += [f"{lp:.4f} {h} {w}" for (h, w), lp in sorted(log_bigram.items())]
    lines += ["", "\\end\\", ""]
    path.write_text("\n".join(lines), encoding="utf-8")
    return path
