"""Make the random-weight tiny faster-whisper model in tests/assets/whisper-tiny-random/.

Random weights transcribe speech as gibberish (random pieces of a small BPE vocabulary): the
model exists only so tests exercise the real faster-whisper/CTranslate2 loading and decoding path
offline. Needs transformers + tokenizers +
ctranslate2 (dev extras); nothing is downloaded.

    .venv/bin/python tests/assets/make_tiny_whisper.py
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

OUT = Path(__file__).resolve().parent / "whisper-tiny-random"
SENTENCES = [
    "hello, can you tell me the opening hours",
    "what time do you close on friday",
    "how much does a haircut cost",
    "where are you located",
    "the quick brown fox jumps over the lazy dog",
    "thank you, goodbye",
]
SPECIALS = [
    "<|startoftranscript|>", "<|en|>", "<|translate|>", "<|transcribe|>", "<|startoflm|>",
    "<|startofprev|>", "<|nocaptions|>", "<|notimestamps|>",
]  # fmt: skip


def main() -> int:
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import (
        WhisperConfig,
        WhisperFeatureExtractor,
        WhisperForConditionalGeneration,
        WhisperTokenizer,
    )

    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        bpe = Tokenizer(models.BPE())
        bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        trainer = trainers.BpeTrainer(
            vocab_size=300,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        bpe.train_from_iterator(SENTENCES * 4, trainer)
        vocab = bpe.get_vocab()
        vocab["<|endoftext|>"] = len(vocab)  # eot is the first id after the regular vocab
        merges = json.loads(bpe.to_str())["model"]["merges"]
        merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in merges]
        tok = WhisperTokenizer(
            vocab=vocab, merges=merges, unk_token="<|endoftext|>", bos_token="<|endoftext|>",
            eos_token="<|endoftext|>",
        )  # fmt: skip
        tok.add_special_tokens({"additional_special_tokens": SPECIALS})
        eot = tok.convert_tokens_to_ids("<|endoftext|>")
        ids = {s: tok.convert_tokens_to_ids(s) for s in SPECIALS}
        config = WhisperConfig(
            vocab_size=len(tok) + 1501, d_model=64, encoder_layers=2, decoder_layers=2,
            encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=128,
            decoder_ffn_dim=128, num_mel_bins=80, max_source_positions=1500,
            max_target_positions=448, pad_token_id=eot, bos_token_id=eot, eos_token_id=eot,
            decoder_start_token_id=ids["<|startoftranscript|>"], suppress_tokens=[],
            begin_suppress_tokens=[eot],
        )  # fmt: skip
        model = WhisperForConditionalGeneration(config)
        with torch.no_grad():
            # Zero the (tied) output embeddings of <|endoftext|>, the specials and the timestamp
            # tokens so greedy decoding picks ordinary text tokens: the transcript is random
            # words up to the caller's max_new_tokens instead of an empty string.
            model.model.decoder.embed_tokens.weight[eot:] = 0.0
        hf = tmp / "hf"
        model.save_pretrained(hf)
        tok.save_pretrained(hf)
        WhisperFeatureExtractor(feature_size=80).save_pretrained(hf)
        if OUT.exists():
            shutil.rmtree(OUT)
        converter = Path(sys.executable).parent / "ct2-transformers-converter"
        subprocess.run(
            [str(converter), "--model", str(hf), "--output_dir", str(OUT), "--copy_files",
             "tokenizer.json", "preprocessor_config.json", "--quantization", "float32"],
            check=True,
        )  # fmt: skip
    print(f"wrote {OUT} ({sum(p.stat().st_size for p in OUT.iterdir()) / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
