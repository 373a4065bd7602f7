"""Shared fixtures: tiny random-init models of every supported architecture, with a small byte-level tokenizer."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)

CORPUS = [
    "When Mary and John went to the store, John gave a drink to Mary.",
    "The Eiffel Tower is in the city of Paris.",
    "After the party, Alice gave a book to Bob because Bob asked for it.",
    "The capital of France is Paris and the capital of Italy is Rome.",
] * 20


@pytest.fixture(scope="session")
def tokenizer():
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(CORPUS, vocab_size=320, min_frequency=1, special_tokens=["<|endoftext|>"])
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, eos_token="<|endoftext|>",
                                  bos_token="<|endoftext|>", pad_token="<|endoftext|>")
    return tok


def make_model(arch: str, vocab: int = 320):
    """A tiny fp32 random-init causal LM of one architecture family, eager attention, eval mode."""
    import transformers as tf

    torch.manual_seed(0)
    common = dict(vocab_size=vocab, attn_implementation="eager")
    if arch == "gpt2":
        cfg = tf.GPT2Config(n_layer=3, n_embd=32, n_head=4, n_positions=64, bos_token_id=0, eos_token_id=0, **common)
    elif arch == "gpt_neox":
        cfg = tf.GPTNeoXConfig(num_hidden_layers=3, hidden_size=32, num_attention_heads=4, intermediate_size=64,
                               max_position_embeddings=64, use_parallel_residual=False, bos_token_id=0,
                               eos_token_id=0, **common)
    elif arch == "gpt_neox_parallel":
        cfg = tf.GPTNeoXConfig(num_hidden_layers=3, hidden_size=32, num_attention_heads=4, intermediate_size=64,
                               max_position_embeddings=64, use_parallel_residual=True, bos_token_id=0,
                               eos_token_id=0, **common)
    elif arch in ("llama", "mistral", "qwen2", "qwen3"):
        cls = {"llama": tf.LlamaConfig, "mistral": tf.MistralConfig, "qwen2": tf.Qwen2Config,
               "qwen3": tf.Qwen3Config}[arch]
        cfg = cls(num_hidden_layers=3, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                  intermediate_size=64, max_position_embeddings=64, head_dim=8, bos_token_id=0, eos_token_id=0,
                  pad_token_id=0, **common)
    elif arch in ("gemma", "gemma2"):
        cls = {"gemma": tf.GemmaConfig, "gemma2": tf.Gemma2Config}[arch]
        cfg = cls(num_hidden_layers=3, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                  intermediate_size=64, max_position_embeddings=64, head_dim=8, bos_token_id=0, eos_token_id=0,
                  pad_token_id=0, **common)
    else:
        raise ValueError(arch)
    return tf.AutoModelForCausalLM.from_config(cfg).eval()


ARCHS = ["gpt2", "gpt_neox", "llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2"]


@pytest.fixture(scope="session")
def models():
    return {a: make_model(a) for a in ARCHS + ["gpt_neox_parallel"]}


@pytest.fixture()
def gpt2_lab(models, tokenizer):
    import interplab as ilab

    return ilab.Lab(models["gpt2"], tokenizer, model_id="tiny-gpt2")


@pytest.fixture(scope="session")
def chromium():
    """One headless Debian Chromium for the session (launch flags in tests/e2e/harness.py, shared with the click
    benchmark), driven by one sync Playwright: the bare-page and JupyterLab tests both use it (a second
    sync_playwright() inside the first one's event loop is refused). Skips only when Chromium is not installed."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent / "e2e"))
    from harness import CHROMIUM, CHROMIUM_ARGS, chromium_missing

    reason = chromium_missing()
    if reason:
        pytest.skip(reason)
    sync_api = pytest.importorskip("playwright.sync_api", reason="python playwright is not installed")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()
