"""interplab.zoo: the embedded ioi-tiny model (behaviour + circuit goals, measured with plain hooks), its tokenizer,
the retraining script, random models and the vendored GPT-2 tokenizer."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from interplab import zoo  # noqa: E402
from interplab.zoo import corpus  # noqa: E402
from interplab.zoo import evaluate_ioi_tiny as ev  # noqa: E402

MODEL_DIR = zoo.EMBEDDED["ioi-tiny"]
IOI_PROMPT = "When Mary and John went to the store, John gave a drink to"


@pytest.fixture(scope="module")
def ioi():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(min(2, torch.get_num_threads()))
    model = AutoModelForCausalLM.from_pretrained(MODEL_DIR)
    model.eval()
    tok = AutoTokenizer.from_pretrained(MODEL_DIR)
    return model, tok


@pytest.fixture(scope="module")
def patching(ioi):
    model, tok = ioi
    n_hooks = _hook_count(model)
    res = ev.patch_experiments(model, tok, zoo.ioi_dataset(100, "test", seed=3))
    assert _hook_count(model) == n_hooks, "evaluation left hooks on the model"
    return res


def _hook_count(model):
    return sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in model.modules())


# ------------------------------------------------------------------------------------------- package folder
def test_embedded_folder_is_complete_and_small():
    names = {p.name for p in MODEL_DIR.iterdir()}
    for f in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "MODEL_CARD.md"):
        assert f in names, f"{f} missing from {MODEL_DIR}"
    total = sum(p.stat().st_size for p in MODEL_DIR.iterdir() if p.is_file())
    assert total <= 10 * 2**20, f"ioi_tiny is {total / 2**20:.1f} MiB"
    cfg = json.loads((MODEL_DIR / "config.json").read_text())
    assert cfg["model_type"] == "gpt2"
    assert cfg.get("attn_implementation", cfg.get("_attn_implementation")) == "eager"


def test_loads_offline_as_standard_classes(ioi):
    from transformers import GPT2LMHeadModel, PreTrainedTokenizerFast

    model, tok = ioi
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    assert isinstance(model, GPT2LMHeadModel)
    assert isinstance(tok, PreTrainedTokenizerFast)
    assert model.config._attn_implementation == "eager"
    assert tok.eos_token == "<|endoftext|>" and tok.pad_token == tok.eos_token and tok.bos_token == tok.eos_token
    with torch.no_grad():
        out = model(**tok(IOI_PROMPT, return_tensors="pt"), output_attentions=True)
    assert out.attentions is not None and len(out.attentions) == model.config.n_layer
    assert torch.allclose(out.attentions[0].sum(-1), torch.ones(1))


def test_model_card_reports_figures():
    card = (MODEL_DIR / "MODEL_CARD.md").read_text()
    for needle in ("python -m interplab.zoo.evaluate_ioi_tiny", "accuracy", "logit diff", "resid_pre", "L1",
                   "cannot"):
        assert needle in card
    # a schedule stopped early is named as such, so that a reader can retrain it
    info = json.loads((MODEL_DIR / "training_info.json").read_text())
    done, schedule = info["steps"], info["args"]["steps"]
    assert (f"the first {done} steps of a {schedule}-step" if done != schedule else f"{done} steps") in card
    assert "three other samples of prompts" in card  # the check of the family goals on other name pairs


def test_card_tells_a_duplicate_token_head_from_a_positional_or_averaging_one():
    from interplab.zoo.model_card import duplicate_token_head

    # one layer, four heads, the kinds the retraining runs grew (corpus_repeated_name's status): H0 looks at the
    # intro's second slot (S1 there in ABBA prompts, IO in BABA ones), H1 at every earlier name (IO a little more),
    # H2 at the earlier copy of the name in both orders, H3 at the copy in ABBA but at both names alike in BABA
    kinds = {"S2->S1 ABBA": [0.60, 0.35, 0.31, 0.41], "S2->IO ABBA": [0.05, 0.40, 0.10, 0.17],
             "S2->S1 BABA": [0.05, 0.33, 0.36, 0.30], "S2->IO BABA": [0.55, 0.40, 0.10, 0.30]}

    def attention(heads):
        a = {k: [[v[h] for h in heads]] for k, v in kinds.items()}
        for k in ("S2->S1", "S2->IO"):
            a[k] = [[(x + y) / 2 for x, y in zip(a[f"{k} ABBA"][0], a[f"{k} BABA"][0])]]
        return a

    (_, head), s1, io, met = duplicate_token_head(attention([0, 1, 2, 3]))
    assert (head, round(s1, 2), round(io, 2), met) == (2, 0.31, 0.10, True)  # its weaker order, ABBA
    # without it: the closest is the averaging head, shown with the IO figure that disqualifies it
    (_, head), s1, io, met = duplicate_token_head(attention([0, 1, 3]))
    assert (head, round(s1, 2), round(io, 2), met) == (1, 0.33, 0.40, False)
    for alone in (0, 1, 3):  # each of the others alone fails
        assert duplicate_token_head(attention([alone]))[3] is False
    assert duplicate_token_head(attention([2]))[3] is True


# ------------------------------------------------------------------------------------------- behaviour
@pytest.mark.parametrize("split", ["test_pairs", "test_templates", "test"])
def test_heldout_accuracy(ioi, split):
    model, tok = ioi
    acc, _ = ev.score(model, tok, zoo.ioi_dataset(200, split, seed=7))
    assert acc >= 0.95, f"{split}: accuracy {acc:.3f}"


@pytest.mark.parametrize("split", ["test_pairs", "test_templates", "test"])
def test_heldout_logit_diff(ioi, split):
    model, tok = ioi
    _, ld = ev.score(model, tok, zoo.ioi_dataset(200, split, seed=7))
    assert ld >= 3.0, f"{split}: mean logit diff {ld:.2f}"


def test_heldout_phrasing_families_are_well_formed(ioi):
    # issue 15's held-out phrasings (evaluate_ioi_tiny.HELDOUT_FAMILIES) and the later set: clean/corrupt differ in
    # S2 only, S twice, IO once
    _, tok = ioi
    for family in ev.ALL_FAMILIES:
        ds = ev.family_dataset(family, 10, seed=7)
        assert ds == ev.family_dataset(family, 10, seed=7)
        for r in ds:
            c, k = tok.encode(r["clean"]), tok.encode(r["corrupt"])
            assert len(c) == len(k) and sum(a != b for a, b in zip(c, k)) == 1, r
            io, s = r["answer"].strip(), r["wrong"].strip()
            words = r["clean"].replace(",", " ").replace(".", " ").split()
            assert words.count(s) == 2 and words.count(io) == 1, r
            assert corpus._pair_is_test(io, s)


def test_heldout_phrasing_families_meet_issue_15(ioi):
    # each family on its own: top-1 = IO >= 0.95 and mean logit diff >= 3 (the card's figures, same prompts)
    model, tok = ioi
    scores = ev.family_scores(model, tok, seed=0)
    missed = {f: v for f, v in scores.items() if v["top1"] < 0.95 or v["logit_diff"] < 3}
    assert not missed, missed


@pytest.mark.parametrize("module,simple,third", [("corpus", False, 0), ("corpus_repeated_name", False, 0),
                                                 ("corpus_repeated_name", True, 0),
                                                 ("corpus_repeated_name", False, 0.25)])
def test_heldout_families_never_occur_in_training_text(module, simple, third):
    import importlib
    import random

    gen = importlib.import_module(f"interplab.zoo.{module}")
    regs = {f: ev.family_regex(f) for f in ev.ALL_FAMILIES}  # both sets: the goal's and the later one
    for f in ev.ALL_FAMILIES:  # each regex matches its own family
        assert regs[f].search(ev.family_dataset(f, 1)[0]["clean"]), f
    rng = random.Random("train-2")
    options = {"third_name": third} if third else {}
    for _ in range(20_000):
        prefix, rest = (gen.training_document(rng, 0.85, simple=True) if simple else
                        gen.training_document(rng, 0.85, **options))
        hits = [f for f, r in regs.items() if r.search(prefix + rest)]
        assert not hits, (hits, prefix + rest)


def test_third_name_option_repeats_a_third_intro_name_and_keeps_the_answer():
    """--third-name: the intro names three people; the answer is the one of them not said again (the other two are
    S and the third name); with the option off the text is the same as without it."""
    import random
    import re

    from interplab.zoo import corpus_repeated_name as gen

    rng = random.Random(0)
    for _ in range(400):
        ex = gen.ioi_example(rng, third_name=1.0)
        words = re.findall(r"[A-Z][a-z]+", ex["prompt"])
        names = [w for w in words if w in gen.NAMES]
        intro = names[:3]
        assert len(set(intro)) == 3 and ex["io"] in intro and ex["s"] in intro, ex
        assert [n for n in intro if names.count(n) == 1] == [ex["io"]], ex
    a, b = random.Random(1), random.Random(1)
    assert [gen.training_document(a, 0.85) for _ in range(300)] == [
        gen.training_document(b, 0.85, third_name=0.0) for _ in range(300)]


def test_classic_prompt_answer_is_io(ioi):
    model, tok = ioi
    with torch.no_grad():
        logits = model(**tok(IOI_PROMPT, return_tensors="pt")).logits[0, -1]
    assert logits[tok.encode(" Mary")[0]] > logits[tok.encode(" John")[0]]


def test_capitals_are_known_for_the_steering_notebook(ioi):
    # notebooks/02 steers "The capital of Spain is" from ' Madrid' to ' Paris'
    model, tok = ioi
    for country, capital in corpus.FACTS.items():
        with torch.no_grad():
            logits = model(**tok(f"The capital of {country} is", return_tensors="pt")).logits[0, -1]
        assert tok.decode([int(logits.argmax())]) == f" {capital}", country


def test_corrupt_prompt_flips_the_answer(ioi):
    model, tok = ioi
    ds = zoo.ioi_dataset(100, "test", seed=5)
    clean = ev.logit_diffs(model, tok, ds, key="clean")
    corrupt = ev.logit_diffs(model, tok, ds, key="corrupt")
    assert clean.mean() > 3 and corrupt.mean() < -3


# ------------------------------------------------------------------------------------------- circuit
def test_patching_sanity_embedding_at_s2_restores_everything(patching):
    # resid_pre 0 at S2 is the only input difference between clean and corrupt: patching it must give exactly 1
    assert patching["resid_pre_named"][0]["S2"] == pytest.approx(1.0, abs=1e-4)
    assert abs(patching["resid_pre_named"][0]["IO"]) < 1e-4  # IO's embedding is the same in both runs


def test_no_single_head_restores_most_of_the_logit_diff(patching):
    best = max(v for row in patching["z_all"] for v in row)
    assert best <= 0.60, f"one head (all positions) restores {best:.2f}"


def test_a_later_layer_head_matters_at_the_final_position(patching):
    cells = {(l, h): v for l, row in enumerate(patching["z_end"]) for h, v in enumerate(row) if l >= 1}
    (l, h), best = max(cells.items(), key=lambda kv: kv[1])
    assert best >= 0.20, f"best head in layer >= 1 at END: L{l}H{h} = {best:.2f}"


def test_information_stays_at_s2_beyond_layer_0(patching):
    vals = {l: row["S2"] for l, row in enumerate(patching["resid_pre_named"]) if l >= 1}
    assert max(vals.values()) >= 0.30, f"resid_pre at S2, layers >= 1: {vals}"


# ------------------------------------------------------------------------------------------- tokenizer
@pytest.mark.parametrize("text", [
    "Hello 🤖🎉 world", "<div class=\"x\">a &amp; b</div>", "中文字符测试", "Ünïcödé — ñ", "  two  spaces\n\ttab",
    "<|endoftext|> is special", "",
])
def test_any_string_tokenizes_and_round_trips(ioi, text):
    _, tok = ioi
    ids = tok.encode(text)
    assert tok.unk_token_id is None or text == "<|endoftext|> is special" or tok.unk_token_id not in ids
    assert tok.decode(ids) == text


def _shipped_corpus():
    """The corpus module the shipped model was trained on, as its training_info.json records it."""
    from interplab.zoo.train_ioi_tiny import CORPORA

    return CORPORA[json.loads((MODEL_DIR / "training_info.json").read_text())["args"]["corpus"]]


def test_ioi_dataset_comes_from_the_shipped_models_corpus():
    assert zoo.ioi_dataset is _shipped_corpus().ioi_dataset


def test_names_places_objects_are_single_tokens_with_leading_space(ioi):
    _, tok = ioi
    gen = _shipped_corpus()  # the tokenizer was trained on it (its places and objects differ from corpus.py's)
    words = gen.NAMES + gen.PLACES + gen.OBJECTS + list(gen.FACTS) + list(gen.FACTS.values())
    multi = [w for w in words if len(tok.encode(" " + w)) != 1]
    assert not multi
    assert tok.convert_ids_to_tokens(tok.encode(" Mary")) == ["ĠMary"]
    assert 500 <= len(tok) <= 8000


# ------------------------------------------------------------------------------------------- dataset
@pytest.mark.parametrize("module", ["corpus", "corpus_repeated_name"])
def test_ioi_dataset_pairs_and_splits(ioi, module):
    import importlib

    gen = importlib.import_module(f"interplab.zoo.{module}")
    _, tok = ioi
    ds = gen.ioi_dataset(50, "test", seed=0)
    assert ds == gen.ioi_dataset(50, "test", seed=0) and ds != gen.ioi_dataset(50, "test", seed=1)
    for r in ds:
        assert set(r) == {"clean", "corrupt", "answer", "wrong"}
        c, k = tok.encode(r["clean"]), tok.encode(r["corrupt"])
        assert len(c) == len(k) and sum(a != b for a, b in zip(c, k)) == 1
        io, s = r["answer"].strip(), r["wrong"].strip()
        assert r["clean"].count(f" {s}") + r["clean"].startswith(s) == 2
        assert gen._pair_is_test(io, s)
    train = gen.ioi_dataset(50, "train", seed=0)
    assert not any(gen._pair_is_test(r["answer"].strip(), r["wrong"].strip()) for r in train)
    # the shortcut is defeated: in many prompts S2 is not the last name before the end
    later_name = [r for r in ds if any(f" {n} " in r["clean"].split(r["wrong"])[-1] + " " for n in gen.NAMES)]
    assert len(later_name) >= 10
    with pytest.raises(ValueError, match="split"):
        gen.ioi_dataset(3, "validation")


# ------------------------------------------------------------------------------------------- retraining
def _train(out, *options):
    """Run the training script in a subprocess on one thread; returns the finished process."""
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.run([sys.executable, "-m", "interplab.zoo.train_ioi_tiny", *options, "--out", str(out),
                           "--threads", "1"], capture_output=True, text=True, timeout=300, env=env,
                          cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _has_avx2() -> bool:
    """Whether torch can run its AVX2 kernels here (x86-64 with AVX2 or AVX-512; not an ARM machine)."""
    import torch

    return torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")


@pytest.mark.parametrize("corpus_name", ["classic", "repeated-name"])
def test_training_script_smoke(tmp_path, corpus_name):
    out = tmp_path / "m"
    # repeated-name: a 6-step schedule stopped at step 3 (the shipped recipe stops its schedule early too)
    steps = ["--steps", "3"] if corpus_name == "classic" else ["--steps", "6", "--stop-at", "3"]
    options = [*steps, "--eval-every", "3", "--corpus", corpus_name]
    snapshots = ["--save-every", "1", "--save-from", "2"] if corpus_name == "repeated-name" else []
    # classic: with the kernels pinned to their AVX2 paths (the same sums on any x86-64 CPU), where the CPU has them
    pinned = corpus_name == "classic" and _has_avx2()
    isa = ["--cpu-isa", "avx2"] if pinned else []
    proc = _train(out, *options, *snapshots, *isa)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(out)
    tok = AutoTokenizer.from_pretrained(out)
    assert model.config.n_layer == 4 and model.config.n_head == 4 and model.config.n_embd == 128
    assert len(tok.encode(" Mary")) == 1 and (out / "model.safetensors").exists()
    info = json.loads((out / "training_info.json").read_text())
    assert info["args"]["corpus"] == corpus_name and info["steps"] == 3 and "step 3:" in proc.stdout
    assert "step 6:" not in proc.stdout and info["args"]["steps"] == (3 if corpus_name == "classic" else 6)
    assert "out" not in info["args"]  # the builder's folder is no part of the recipe
    import torch

    env = info["environment"]  # what decides the bytes besides the arguments
    assert env["torch"] == torch.__version__ and env["transformers"]
    if pinned:
        from interplab.zoo.train_ioi_tiny import PINNED_KERNELS

        assert env["cpu_capability"] == "AVX2"
        assert {k: env[k] for k in ("MKL_CBWR", "ONEDNN_MAX_CPU_ISA")} == {
            k: PINNED_KERNELS[k] for k in ("MKL_CBWR", "ONEDNN_MAX_CPU_ISA")}
        assert PINNED_KERNELS["MKL_CBWR"].endswith(",STRICT")  # the strict mode, or Intel and AMD CPUs sum apart
    else:
        assert env["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    if corpus_name == "repeated-name":  # the curriculum and the wider embedding init are on by default
        assert info["args"]["simple_steps"] > 0 and info["args"]["emb_std"] == 0.1
        assert "simple documents" in proc.stdout and "p_simple 1.00" in proc.stdout
        # --save-every: the snapshot is a model folder of its own, one step short of the final weights
        snap = AutoModelForCausalLM.from_pretrained(out / "step-2")
        assert json.loads((out / "step-2" / "training_info.json").read_text())["steps"] == 2
        assert not (out / "step-1").exists() and not (out / "step-3").exists()
        assert any(not torch.equal(a, b) for a, b in zip(snap.parameters(), model.parameters()))
        # and saving snapshots leaves the run's own weights as they are without them
        plain = tmp_path / "plain"
        _train(plain, *options)
        assert (plain / "model.safetensors").read_bytes() == (out / "model.safetensors").read_bytes()
        # and a snapshot is the run stopped at that step, byte for byte (so a recipe search may ship one)
        stopped = tmp_path / "stopped"
        _train(stopped, "--steps", "6", "--stop-at", "2", "--eval-every", "3", "--corpus", corpus_name)
        assert (stopped / "model.safetensors").read_bytes() == (out / "step-2" / "model.safetensors").read_bytes()


def test_training_without_evaluation_gives_the_same_weights(tmp_path):
    # --eval-every 0 (the cross-CPU check's runs): no evaluation, and the evaluation draws nothing the training uses
    quiet, evaluated = tmp_path / "quiet", tmp_path / "evaluated"
    proc = _train(quiet, "--steps", "2", "--corpus", "classic", "--eval-every", "0")
    _train(evaluated, "--steps", "2", "--corpus", "classic", "--eval-every", "1")
    assert "step 2:" not in proc.stdout and "saved to" in proc.stdout
    assert (quiet / "model.safetensors").read_bytes() == (evaluated / "model.safetensors").read_bytes()


def test_also_ema_saves_the_average_that_ema_alone_gives(tmp_path):
    # --also-ema (recipe searches): more weight averages beside the snapshots, without touching the training
    extra, alone = tmp_path / "extra", tmp_path / "alone"
    _train(extra, "--steps", "3", "--corpus", "classic", "--eval-every", "0", "--save-every", "1", "--save-from", "2",
           "--also-ema", "0.5", "0.9")
    _train(alone, "--steps", "3", "--corpus", "classic", "--eval-every", "0", "--save-every", "1", "--save-from", "2",
           "--ema", "0.9")
    assert (extra / "step-2-ema0.9" / "model.safetensors").read_bytes() == \
        (alone / "step-2" / "model.safetensors").read_bytes()
    assert (extra / "step-2-ema0.5" / "model.safetensors").read_bytes() != \
        (extra / "step-2-ema0.9" / "model.safetensors").read_bytes()
    info = json.loads((extra / "step-2-ema0.9" / "training_info.json").read_text())
    assert info["args"]["ema"] == 0.9 and info["steps"] == 2


# scripts/pinned_weights.sh's 2-step run: the same sha256 on a Xeon with AVX-512, on a real AMD EPYC (AVX2 only) and
# under emulated Intel Haswell and AMD EPYC-Rome CPUs (transformers 5.24.0), and on the AMD EPYC with 5.25.0. Other
# library versions may initialise or tokenize otherwise; where they give the same bytes the test still checks the CPU
PINNED_2_STEPS = ("705875433e0e0f7cb1db032ddbc56e8c9c3761337063c4b5b851d2dfdf051422",
                  [{"torch": "2.13.0+cpu", "transformers": "5.24.0", "tokenizers": "0.23.3"},
                   {"torch": "2.13.0+cpu", "transformers": "5.25.0", "tokenizers": "0.23.3"}])


def test_pinned_kernels_give_the_same_weights_on_every_x86_cpu(tmp_path):
    import tokenizers
    import torch
    import transformers

    want, recorded = PINNED_2_STEPS
    if not _has_avx2():
        pytest.skip("the pinned kernels need an x86-64 CPU with AVX2")
    out = tmp_path / "pinned"
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.run([sys.executable, "-m", "interplab.zoo.train_ioi_tiny", "--cpu-isa", "avx2", "--steps", "2",
                           "--batch", "2", "--eval-every", "0", "--out", str(out)], capture_output=True, text=True,
                          timeout=300, env=env, cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 0, proc.stderr[-3000:]
    import hashlib

    got = hashlib.sha256((out / "model.safetensors").read_bytes()).hexdigest()
    here = {"torch": torch.__version__, "transformers": transformers.__version__, "tokenizers": tokenizers.__version__}
    if got != want and here not in recorded:
        pytest.skip(f"these library versions ({here}) give other pinned bytes ({got[:16]}...) than the recorded ones "
                    f"{recorded}: their doing or the CPU's; bash scripts/pinned_weights.sh tells, then record them")
    assert got == want, (f"the pinned kernels gave other weights on this CPU ({got[:16]}...; "
                         f"{torch.backends.cpu.get_cpu_capability()}): bash scripts/pinned_weights.sh compares CPUs")


def test_pinned_kernels_are_refused_where_the_cpu_cannot_run_them():
    from interplab.zoo.train_ioi_tiny import pinned_kernels_problem

    assert pinned_kernels_problem("avx2", "AVX2") is None and pinned_kernels_problem("native", "DEFAULT") is None
    problem = pinned_kernels_problem("avx2", "DEFAULT")  # e.g. an ARM Mac, or an x86 CPU without AVX2
    assert "DEFAULT" in problem and "--cpu-isa native" in problem


# ------------------------------------------------------------------------------------------- random models
def test_gpt2_tokenizer_real_ids():
    tok = zoo.gpt2_tokenizer()
    assert tok.encode(" Mary") == [5335] and tok.encode(" John") == [1757]
    assert len(tok.encode(IOI_PROMPT)) == 14
    assert len(tok) == 50257 and tok.eos_token_id == 50256 and tok.pad_token_id == 50256
    assert tok.decode(tok.encode("<p>héllo 🤖 中文</p>")) == "<p>héllo 🤖 中文</p>"
    assert (zoo.GPT2_TOKENIZER_DIR / "LICENSE").exists()


def test_random_gpt2_small_shape():
    model, tok = zoo.random_model("gpt2-small")
    c = model.config
    assert (c.n_layer, c.n_head, c.n_embd, c.vocab_size) == (12, 12, 768, 50257)
    assert 120e6 < sum(p.numel() for p in model.parameters()) < 130e6
    assert not model.training and c._attn_implementation == "eager"
    assert tok.encode(" Mary") == [5335]


@pytest.mark.parametrize("name,model_type", [("gpt2-tiny", "gpt2"), ("llama-tiny", "llama"),
                                             ("neox-tiny", "gpt_neox")])
def test_random_tiny_models(name, model_type):
    model, tok = zoo.random_model(name, seed=1)
    assert model.config.model_type == model_type
    assert model.config._attn_implementation == "eager" and not model.training
    assert model.config.vocab_size == len(tok)
    ids = tok(IOI_PROMPT, return_tensors="pt")
    with torch.no_grad():
        out = model(**ids, output_attentions=True)
    assert out.logits.shape == (1, ids["input_ids"].shape[1], len(tok))
    assert out.attentions[0] is not None
    again, _ = zoo.random_model(name, seed=1)
    other, _ = zoo.random_model(name, seed=2)
    p0, p1, p2 = (next(iter(m.parameters())) for m in (model, again, other))
    assert torch.equal(p0, p1) and not torch.equal(p0, p2)


def test_import_is_light():
    # interplab/__init__.py (not this module) may import torch itself; zoo must not add it
    code = ("import sys, interplab; before = 'torch' in sys.modules; import interplab.zoo as z; "
            "assert before or 'torch' not in sys.modules, 'interplab.zoo imported torch'; print(z.EMBEDDED)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_unknown_names_raise():
    with pytest.raises(ValueError, match="gpt2-small"):
        zoo.random_model("gpt3")
    with pytest.raises(ValueError, match="ioi-tiny"):
        zoo.load_embedded("nope")


def _corpus_sample(gen) -> dict:
    """What a corpus module generates, a sample of each kind: its word and template lists, training documents (the
    trainer's p_ioi and the default), ``ioi_dataset`` of every split, narratives and the tokenizer's text."""
    import random

    lists = {name: getattr(gen, name) for name in ("NAMES", "PLACES", "OBJECTS", "FACTS", "FILLER", "INTROS_TRAIN",
                                                    "INTROS_TEST", "POSTS_TRAIN", "POSTS_TEST", "ACTIONS_TRAIN",
                                                    "ACTIONS_TEST", "MIDDLES")}
    options = [{}] if gen is corpus else [{}, {"simple": True}, {"third_name": 0.25}]
    docs = {}
    for seed in (0, 2):
        for i, kw in enumerate(options):
            rng = random.Random(f"train-{seed}")
            docs[f"{seed}/{i}"] = [gen.training_document(rng, 0.85, **kw) for _ in range(300)]
        rng = random.Random(seed)
        docs[f"{seed}/default"] = [gen.training_document(rng) for _ in range(200)]
    splits = {f"{split}/{seed}": gen.ioi_dataset(40, split, seed=seed)
              for split in ("train", "test", "test_pairs", "test_templates") for seed in (0, 3)}
    rng = random.Random(1)
    stories = [gen.narrative(rng) for _ in range(300)]
    text = list(gen.tokenizer_training_text(1, n=300))
    return {"lists": lists, "docs": docs, "splits": splits, "narratives": stories, "tokenizer_text": text}


@pytest.mark.parametrize("module,digest", [
    ("corpus", "476388f20dd329b3"),
    ("corpus_repeated_name", "68aeedf1096d0c8b"),
])
def test_corpus_text_is_pinned(module, digest):
    """The generated text, byte for byte: the shipped ioi-tiny was trained on corpus_repeated_name's documents and
    evaluated on its ``ioi_dataset``, and the classic corpus retrains the first ioi-tiny, so a change to either
    (also one that only reorders random draws) changes the model its training script gives. Update a pin only with
    a deliberate change of the corpus (and a retrained model where it is the shipped one's)."""
    import hashlib
    import importlib

    gen = importlib.import_module(f"interplab.zoo.{module}")
    blob = json.dumps(_corpus_sample(gen), sort_keys=True, ensure_ascii=False).encode()
    assert hashlib.sha256(blob).hexdigest()[:16] == digest
