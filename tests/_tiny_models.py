"""Tiny random-init models of every supported architecture and the tokenizer corpus, importable from any test.

A module of its own, not conftest.py: `from conftest import ...` inside a test is order-dependent (pytest imports
tests/, tests/widgets/ and tests/e2e/ conftest.py each as the module `conftest`; the last one collected wins).
"""

import torch

CORPUS = [
    "When Mary and John went to the store, John gave a drink to Mary.",
    "The Eiffel Tower is in the city of Paris.",
    "After the party, Alice gave a book to Bob because Bob asked for it.",
    "The capital of France is Paris and the capital of Italy is Rome.",
] * 20


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
