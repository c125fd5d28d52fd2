"""The training loop on a tiny model: loss falls on a fixed held batch, and a paused-then-resumed
run ends with exactly the weights of an uninterrupted one. Exports load through engine.loader."""

import json

import torch

from diffvoice.agent.train.cli import add_train_arguments, run_train
from diffvoice.agent.train.trainer import BatchMaker, TrainConfig, setup, train
from diffvoice.engine.loader import load_checkpoint
from diffvoice.engine.train.objective import masked_loss

TINY = dict(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, head_dim=16,
            intermediate_size=64, vocab_size=400, tokenizer_samples=300, batch_size=8,
            warmup_steps=2, progress=False, threads=1, verify_snaps=False)


def _held_loss(model, make_batch):
    batch = make_batch(10_000, batch_size=32)  # a step index training never reaches
    with torch.no_grad():
        return float(masked_loss(model(batch.input_ids, batch.positions, batch.attn_mask),
                                 batch.targets))


def test_training_lowers_held_loss_and_exports_a_loadable_checkpoint(tmp_path):
    cfg = TrainConfig(out=str(tmp_path / "m"), max_steps=40, lr=3e-3, **TINY)
    gen, tok, mcfg, model0 = setup(cfg)
    make_batch = BatchMaker(cfg, gen, tok, mcfg)
    before = _held_loss(model0, make_batch)
    summary = train(cfg)
    loaded = load_checkpoint(tmp_path / "m")
    after = _held_loss(loaded.model, make_batch)
    assert summary["steps"] == 40
    assert after < before - 0.8, (before, after)  # nats; ~1.4 measured
    assert loaded.config.block_size == 8 and loaded.config.mask_token_id == tok.token_id("<|mask|>")
    assert (tmp_path / "m" / "facts.yaml").is_file()
    # a receptionist asks for the decoding it is trained and evaluated with, by default
    assert loaded.default_decoding == "fast"
    logged = [json.loads(line) for line in (tmp_path / "m" / "train_log.jsonl").open()]
    assert logged[-1]["step"] == 40 and logged[-1]["tokens_per_s"] > 0


def test_pause_and_resume_matches_uninterrupted_run(tmp_path, capsys):
    import argparse

    def cli(out, *extra):
        parser = argparse.ArgumentParser()
        add_train_arguments(parser)
        args = parser.parse_args(["--out", str(out), "--max-steps", "4", "--hidden-size", "32",
                                  "--num-layers", "1", "--num-heads", "2", "--num-kv-heads", "1",
                                  "--head-dim", "16", "--intermediate-size", "64",
                                  "--vocab-size", "400", "--tokenizer-samples", "300",
                                  "--batch-size", "4", "--threads", "1", "--no-progress",
                                  "--no-verify-snaps", *extra])
        assert run_train(args) == 0

    cli(tmp_path / "a")
    cli(tmp_path / "b", "--stop-at-step", "2")
    assert json.loads((tmp_path / "b" / "train_summary.json").read_text())["steps"] == 2
    cli(tmp_path / "b")
    a = load_checkpoint(tmp_path / "a").model.state_dict()
    b = load_checkpoint(tmp_path / "b").model.state_dict()
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    assert '"steps": 4' in capsys.readouterr().out


def test_bad_config_is_a_clear_error(tmp_path, capsys):
    import argparse

    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    args = parser.parse_args(["--out", str(tmp_path), "--batch-size", "0"])
    assert run_train(args) == 2
    assert "batch_size must be a positive integer" in capsys.readouterr().err
    args = parser.parse_args(["--out", str(tmp_path), "--facts", str(tmp_path / "nope.yaml")])
    assert run_train(args) == 2
    assert "nope.yaml" in capsys.readouterr().err
