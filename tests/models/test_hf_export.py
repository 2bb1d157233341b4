"""Taking a model away (issue 18): our dense GPT as a transformers model with the same logits, exported
with its tokenizer by `slm export`, sampled by `slm generate`, scored by lm-evaluation-harness (`slm eval`)."""

from __future__ import annotations

import json
import math

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from slm.data import tokenizers
from slm.data.bpe import train_bpe
from slm.harness import valid_documents
from slm.models.gpt import GPT, GPTConfig, save_dense
from slm.models.hf import save_pretrained


def _perturbed(cfg: GPTConfig) -> GPT:
    torch.manual_seed(0)
    model = GPT(cfg).eval()
    for p in model.parameters():  # not the init's ones and zeros: every weight must land in its place
        p.data.add_(0.05 * torch.randn_like(p))
    return model


@pytest.mark.parametrize("mlp, architecture, parametrization", [
    ("gelu", "ArceeForCausalLM", "sp"), ("swiglu", "LlamaForCausalLM", "sp"),
    # µP at twice its base width and depth: the readout's 1/m and CompleteP's branch multiplier are folded in
    ("gelu", "ArceeForCausalLM", "mup")])
def test_exported_model_has_our_logits_and_generates(mlp, architecture, parametrization, tmp_path):
    model = _perturbed(GPTConfig(vocab_size=300, seq_len=64, n_layer=2, d_model=64, n_head=2, d_ff=128, mlp=mlp,
                                 parametrization=parametrization, mup_base_width=32, mup_base_depth=1))
    save_pretrained(model, tmp_path)  # no tokenizer, no end-of-text token: generation runs its 6 steps
    hf = AutoModelForCausalLM.from_pretrained(tmp_path, local_files_only=True).eval()
    assert type(hf).__name__ == architecture
    x = torch.randint(0, 300, (3, 40))
    with torch.no_grad():
        torch.testing.assert_close(hf(x).logits, model(x).logits, rtol=0, atol=1e-5)
        out = hf.generate(x[:1, :5], max_new_tokens=6, do_sample=False)
        greedy = x[:1, :5]
        for _ in range(6):  # our own greedy decoding, step by step
            greedy = torch.cat([greedy, model(greedy).logits[:, -1:].argmax(-1)], dim=1)
    assert out.tolist() == greedy.tolist()


@pytest.fixture(scope="module")
def run_with_model(corpus_dir, tmp_path_factory):
    """A run folder as training leaves it: a real BPE trained on the generic corpus, a dense model."""
    run = tmp_path_factory.mktemp("run")
    train_bpe(corpus_dir, run / "tokenizer", vocab_size=384, max_chars=300_000)
    model = _perturbed(GPTConfig(vocab_size=384, seq_len=128, n_layer=2, d_model=64, n_head=2, d_ff=128))
    save_dense(model, run / "checkpoints" / "generic" / "model.safetensors", {"method": "generic"})
    return run, model


def test_slm_export_writes_a_folder_transformers_loads_offline(run_with_model, corpus_dir, slm_cli, tmp_path):
    run, model = run_with_model
    out = tmp_path / "hf"
    record = json.loads(slm_cli("export", str(run / "checkpoints" / "generic"), "--format", "hf", str(out)).stdout)
    assert record["tokenizer"] == str((run / "tokenizer" / "tokenizer.json").resolve())
    assert record["architecture"] == "ArceeForCausalLM" and record["parameters"] == model.num_params()
    hf = AutoModelForCausalLM.from_pretrained(out, local_files_only=True).eval()
    tok = AutoTokenizer.from_pretrained(out, local_files_only=True)
    sample = valid_documents(corpus_dir, "legal", limit=1)[0][:400]
    ours = tokenizers.load(str(run / "tokenizer" / "tokenizer.json")).encode(sample, add_special_tokens=False).ids
    assert tok(sample, add_special_tokens=False)["input_ids"] == ours
    assert tok.decode(ours) == sample
    assert tok.eos_token == tok.bos_token == "<|endoftext|>" and tok.eos_token_id == 0
    # Plain transformers puts <|endoftext|> first, as every document starts in training and scoring
    # (issue 31: it did not, and last-token logits differed by up to 0.21 from what the platform scored).
    plain = tok(sample, return_tensors="pt", truncation=True, max_length=101)
    assert plain["input_ids"].tolist() == [[0, *ours[:100]]]
    with torch.no_grad():
        torch.testing.assert_close(hf(**plain).logits, model(plain["input_ids"]).logits, rtol=0, atol=1e-5)
    modes = {f.name: f.stat().st_mode & 0o777 for f in out.iterdir()}
    assert len(set(modes.values())) == 1, modes  # the weights as readable as every other file (the umask's)
    again = slm_cli("export", str(run / "checkpoints" / "generic"), str(out), check=False)
    assert again.returncode == 1 and "--replace" in again.stderr


def test_slm_generate_samples_reproducibly_from_a_checkpoint_or_an_export(run_with_model, slm_cli, tmp_path):
    run, _ = run_with_model
    checkpoint = str(run / "checkpoints" / "generic")
    args = ("--prompt", "The court held that", "--max-new-tokens", "12", "--temperature", "0.9", "--top-k", "20")
    first = slm_cli("generate", checkpoint, *args).stdout
    assert first.startswith("The court held that") and len(first) > len("The court held that")
    assert slm_cli("generate", checkpoint, *args).stdout == first  # one seed, one sample
    out = tmp_path / "hf"
    slm_cli("export", checkpoint, str(out))
    assert slm_cli("generate", str(out), *args).stdout == first  # the export samples the same tokens
    assert slm_cli("generate", str(out), *args, "--seed", "1").stdout != first


def test_a_pretrained_bank_is_refused_with_what_to_do(tmp_path, slm_cli):
    from slm.methods import get, save_model
    from slm.models.config import ModelConfig

    soup = get("soup").bind(ModelConfig())
    arch = soup.architecture(GPTConfig(vocab_size=300, seq_len=64, n_layer=1, d_model=32, n_head=2, d_ff=64),
                             n_clusters=4)
    model = soup.build(arch)
    save_model(model, arch, tmp_path / "model.safetensors")
    (tmp_path / "tokenizer").mkdir()
    proc = slm_cli("export", str(tmp_path), str(tmp_path / "hf"), check=False)
    assert proc.returncode != 0 and "specialize it" in proc.stderr and not (tmp_path / "hf").exists()


def test_lm_eval_scores_the_export_as_our_model_does(run_with_model, corpus_dir, tmp_path):
    """The harness's bits per byte, on documents that fit one window, equal ours from the same model's
    log-probabilities (each document after <|endoftext|>, as the harness and training both see it)."""
    from slm.export import export_hf
    from slm.harness import harness_perplexity

    run, model = run_with_model
    out = tmp_path / "hf"
    export_hf(run / "checkpoints" / "generic", out)
    tok = tokenizers.load(str(run / "tokenizer" / "tokenizer.json"))
    documents = [d[:120] for d in valid_documents(corpus_dir, "legal", limit=6)]  # < 128 tokens each
    scores = harness_perplexity(out, "legal", documents, tmp_path)
    nll = 0.0
    with torch.no_grad():
        for text in documents:
            ids = tok.encode(text, add_special_tokens=False).ids
            assert len(ids) < model.config.seq_len
            x = torch.tensor([[0, *ids]])
            logp = torch.log_softmax(model(x[:, :-1]).logits.float(), -1)
            nll -= logp.gather(-1, x[:, 1:].unsqueeze(-1)).sum().item()
    n_bytes = sum(len(t.encode()) for t in documents)
    assert scores["bits_per_byte"] == pytest.approx(nll / n_bytes / math.log(2), rel=1e-5)
    assert scores["byte_perplexity"] == pytest.approx(math.exp(nll / n_bytes), rel=1e-5)


def test_slm_eval_reports_the_harness_beside_the_platform(run_with_model, corpus_dir, slm_cli, tmp_path):
    run, _ = run_with_model
    result = json.loads(slm_cli("eval", str(run / "checkpoints" / "generic"), "--domain", "medical", "--limit", "5",
                                f"corpus.dir={corpus_dir}").stdout)
    assert result["documents"] == 5 and result["written"].endswith("lm_eval/medical.json")
    assert json.loads((run / "checkpoints" / "generic" / "lm_eval" / "medical.json").read_text())["domain"] == "medical"
    # Two protocols on one model (docs/usage.md): per document from <|endoftext|> vs packed rows.
    assert abs(result["bits_per_byte_relative_difference"]) < 0.03
    bad = slm_cli("eval", str(run / "checkpoints" / "generic"), "--domain", "nosuch", f"corpus.dir={corpus_dir}",
                  check=False)
    assert bad.returncode == 1 and "nosuch" in bad.stderr
    # An export is scored in its own folder and named as given, its source checkpoint beside
    export = tmp_path / "exported"
    slm_cli("export", str(run / "checkpoints" / "generic"), str(export))
    scored = json.loads(slm_cli("eval", str(export), "--domain", "medical", "--limit", "2", f"corpus.dir={corpus_dir}").stdout)
    assert scored["written"] == str(export / "lm_eval" / "medical.json") and scored["model"] == str(export)
    assert scored["source"] == str((run / "checkpoints" / "generic" / "model.safetensors").resolve())


def test_slm_eval_puts_the_harness_numbers_into_a_sweeps_table(run_with_model, corpus_dir, slm_cli):
    """`slm eval --sweep`: every specialized model of the table's domain scored, the numbers added as
    columns; the table still reads and folds over seeds as before (a hand-made two-trial table over two
    real checkpoints)."""
    import shutil

    from slm.analysis.results import aggregate
    from slm.records.table import COLUMNS, read_table, write_table

    run, _ = run_with_model
    sweep = run / "sweeps" / "s"
    rows = []
    for seed in (0, 1):
        trial = f"generic-tiny-p10-t3200-s5-seed{seed}"
        folder = sweep / "specialized" / "legal" / trial
        folder.mkdir(parents=True)
        shutil.copy(run / "checkpoints" / "generic" / "model.safetensors", folder / "model.safetensors")
        row = {c: 1.0 for c in COLUMNS}
        row.update(trial=trial, setting="generic-tiny-p10-t3200-s5", seed=seed, method="generic", size="tiny",
                   expert=None, domain="legal", pretrain_steps=10, domain_tokens=3200, specialize_steps=5,
                   perplexity=100.0 + seed)
        rows.append(row)
    write_table(rows, sweep)
    proc = slm_cli("eval", "--sweep", str(sweep), "--domain", "legal", "--limit", "3", f"corpus.dir={corpus_dir}")
    assert proc.stdout.count("[eval] generic-tiny-p10-t3200-s5-seed") == 2
    out = json.loads(proc.stdout[proc.stdout.index("{"):])  # after the per-trial lines, the summary
    assert out["trials"] == 2 and "lm_eval_bits_per_byte" in out["columns"]
    table = read_table(sweep)
    assert all(r["lm_eval_bits_per_byte"] > 0 for r in table)
    assert table[0]["lm_eval_bits_per_byte"] == table[1]["lm_eval_bits_per_byte"]  # the same weights
    assert aggregate(table)[0]["perplexity"] == 100.5


def test_the_exported_tokenizer_takes_its_separator_from_the_file(tmp_path):
    """The document separator is the tokenizer file's special token at id 0 (what the data stages' BPE
    gets, ``slm.data.bpe.EOT``); a BPE without one is refused, naming the file."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from slm.data.bpe import EOT
    from slm.models.hf import hf_tokenizer

    texts = ["the court held that the statute applies", "the patient was given a dose"] * 50
    for name, specials in (("ours", [EOT]), ("plain", [])):
        bpe = Tokenizer(models.BPE())
        bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        bpe.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=300, special_tokens=specials, show_progress=False,
                                                           initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
        bpe.save(str(tmp_path / f"{name}.json"))
    tok = hf_tokenizer(tmp_path / "ours.json", 64)
    assert (tok.eos_token, tok.eos_token_id, tok.bos_token_id, tok.pad_token_id) == (EOT, 0, 0, 0)
    with pytest.raises(ValueError, match=r"plain\.json has no special token at id 0"):
        hf_tokenizer(tmp_path / "plain.json", 64)
