"""Embedded models and tiny random models that work offline.

- ``EMBEDDED["ioi-tiny"]``: folder of a 4-layer GPT-2 trained on synthetic indirect-object-identification text
  (load it with ``AutoModelForCausalLM.from_pretrained`` / ``AutoTokenizer.from_pretrained``; see MODEL_CARD.md).
- ``random_model(name, seed=0)``: a randomly initialised "gpt2-small", "gpt2-tiny", "llama-tiny" or "neox-tiny"
  with an offline tokenizer (the real GPT-2 tokenizer for GPT-2 shapes).
- ``ioi_dataset(n, split="test", seed=0)``: clean/corrupt IOI prompt pairs for patching.

Importing this module does not import torch or transformers.
"""

from __future__ import annotations

from pathlib import Path

from interplab.zoo.corpus_repeated_name import ioi_dataset

HERE = Path(__file__).parent
EMBEDDED: dict[str, Path] = {"ioi-tiny": HERE / "ioi_tiny"}
GPT2_TOKENIZER_DIR = HERE / "gpt2_tokenizer"
RANDOM_MODELS = ("gpt2-small", "gpt2-tiny", "llama-tiny", "neox-tiny")

__all__ = ["EMBEDDED", "GPT2_TOKENIZER_DIR", "RANDOM_MODELS", "ioi_dataset", "load_embedded", "random_model",
           "gpt2_tokenizer"]


def gpt2_tokenizer():
    """The real GPT-2 tokenizer (vendored; ids match OpenAI's GPT-2), pad_token = eos = "<|endoftext|>"."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(GPT2_TOKENIZER_DIR)


def load_embedded(name: str = "ioi-tiny"):
    """(model, tokenizer) of an embedded model, eval mode, eager attention."""
    if name not in EMBEDDED:
        raise ValueError(f"unknown embedded model {name!r}: available {sorted(EMBEDDED)}")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(EMBEDDED[name], attn_implementation="eager")
    model.eval()
    return model, AutoTokenizer.from_pretrained(EMBEDDED[name])


def random_model(name: str, seed: int = 0):
    """A randomly initialised model and an offline tokenizer: ``(model, tokenizer)``, eval mode, eager attention.

    ========== ============================================================= ==================
    name       shape                                                         tokenizer
    ========== ============================================================= ==================
    gpt2-small GPT-2 small: 12 layers, 12 heads, d_model 768, vocab 50257   real GPT-2
    gpt2-tiny  GPT-2: 2 layers, 4 heads, d_model 64, vocab 50257            real GPT-2
    llama-tiny Llama: 2 layers, 4 heads (2 key/value heads), d_model 64     ioi-tiny
    neox-tiny  GPT-NeoX: 2 layers, 4 heads, d_model 64                      ioi-tiny
    ========== ============================================================= ==================
    """
    if name not in RANDOM_MODELS:
        raise ValueError(f"unknown random model {name!r}: use one of {list(RANDOM_MODELS)}")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if name.startswith("gpt2"):
        from transformers import GPT2Config

        tok = gpt2_tokenizer()
        size = dict(n_layer=12, n_head=12, n_embd=768) if name == "gpt2-small" else dict(n_layer=2, n_head=4,
                                                                                           n_embd=64)
        cfg = GPT2Config(vocab_size=50257, n_positions=1024, bos_token_id=50256, eos_token_id=50256, **size)
    else:
        tok = AutoTokenizer.from_pretrained(EMBEDDED["ioi-tiny"])
        vocab = len(tok)
        eos = tok.eos_token_id
        if name == "llama-tiny":
            from transformers import LlamaConfig

            cfg = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                              bos_token_id=eos, eos_token_id=eos, pad_token_id=eos, tie_word_embeddings=False)
        else:
            from transformers import GPTNeoXConfig

            cfg = GPTNeoXConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                num_attention_heads=4, max_position_embeddings=256, bos_token_id=eos,
                                eos_token_id=eos, pad_token_id=eos, tie_word_embeddings=False)
    cfg.pad_token_id = tok.pad_token_id
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    finally:
        torch.random.set_rng_state(state)
    model.eval()
    return model, tok
