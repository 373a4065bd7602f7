"""Steered generation on the Hugging Face engine and on the vLLM engine, in the same run (issue #17):

    build/venv-vllm/bin/python benchmarks/bench_generate.py            # 64 prompts x 32 tokens, ~200M Llama, CPU
    build/venv-vllm/bin/python benchmarks/bench_generate.py --quick    # a small model, for a smoke test
    python benchmarks/bench_generate.py --device cuda                  # where vLLM for GPUs is installed
    python benchmarks/bench_generate.py --vs-hook                      # a steer's cost per step against a plain hook

A random-weight Llama of about 200M parameters (hidden 1024, 12 layers, 16 heads, 8 key-value heads, tied 50257-token
embeddings, fp32) and the real GPT-2 tokenizer; 64 prompts of 9 to 60 tokens; one steering edit (resid_post at the
middle layer, every position) active at every step; greedy, 32 new tokens per prompt whatever the model says (no
stop at end-of-text). Each engine is timed over --repeats runs after one warm-up run; the figure is the median. The
two engines' ids are compared too (the same tokens, fp32). Two more rows, in the same run: the vLLM engine with no
edit (what the edits cost), and vLLM alone, the same token ids through `llm.generate` with no interplab hook or plan
(the most any wrapper of it could reach). On a GPU machine, install vLLM's GPU build in that
environment and pass --device cuda (one GPU: the engine hooks its model in this process; see docs/SCALE.md).
Writes/replaces a "## Steered generation, HF vs vLLM (<device>)" section of benchmarks/RESULTS.md (unless
--no-write).

--vs-hook (no vLLM needed; issue #53 item 9): what a steering edit costs per decoding step on the Hugging Face
model, against the same vector added by a plain forward hook on the same module (no interplab), in the same run:
ioi-tiny (the embedded 4-layer GPT-2), one torch thread, one prompt, greedy, --new-tokens new tokens whatever the
model says. Four ways, interleaved over --repeats rounds (a shared machine's load falls on all of them alike), the
median CPU time of each (one thread: the work done, which load does not stretch): model.generate bare,
model.generate with the plain hook, lab.generate with no edit, lab.generate with ilab.steer. Per step: (seconds -
bare model.generate's) / new tokens. The steered and hooked tokens are compared too (the same ids).
Writes/replaces "## Steered generation per step vs a plain hook (<device>)".
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from results_file import write_section  # noqa: E402

import interplab as ilab  # noqa: E402
from interplab.zoo import gpt2_tokenizer  # noqa: E402

WORDS = ("the river ran past the old mill where the children played every summer while their parents worked in "
         "the fields and the baker sold bread to everyone who came by the square on market days").split()


def prompts(n: int) -> list[str]:
    """n prompts of 9 to 60 words, different starts (no two share a long prefix)."""
    out = []
    for i in range(n):
        k = 9 + (i * 13) % 52
        start = (i * 7) % len(WORDS)
        out.append(" ".join((WORDS * 3)[start:start + k]).capitalize())
    return out


def model(quick: bool):
    import transformers as tf

    torch.manual_seed(0)
    size = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4,
                intermediate_size=704) if quick else dict(hidden_size=1024, num_hidden_layers=12,
                                                         num_attention_heads=16, num_key_value_heads=8,
                                                         intermediate_size=2816)
    cfg = tf.LlamaConfig(vocab_size=50257, max_position_embeddings=256, tie_word_embeddings=True, bos_token_id=50256,
                         eos_token_id=50256, pad_token_id=50256, initializer_range=0.05,
                         attn_implementation="eager", **size)
    return tf.AutoModelForCausalLM.from_config(cfg).eval()


def timed(fn, repeats: int) -> tuple[float, object]:
    fn()  # warm-up
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def vs_hook(args) -> None:
    """A steer's per-step cost against a plain hook adding the same vector, one run (see the module docstring)."""
    from interplab.zoo import load_embedded

    torch.set_num_threads(1)
    m, tok = load_embedded("ioi-tiny")
    m = m.to(args.device)
    lab = ilab.Lab(m, tok, model_id="ioi-tiny")
    layer = lab.n_layers // 2
    vector = torch.randn(lab.d_model, generator=torch.Generator().manual_seed(0))
    vector = (vector / vector.norm() * lab.residual_norm("resid_post", layer)).to(args.device)
    alpha = 2.0
    prompt = "When Mary and John went to the store, John gave a drink to"
    ids = tok(prompt, return_tensors="pt")["input_ids"].to(args.device)
    block = m.get_submodule(f"{lab.sites.arch.layers}.{layer}")  # resid_post = the block's output (element 0)
    n = args.new_tokens
    # what lab.generate(..., stop_at_eos=False) asks of model.generate: greedy, n tokens, no end-of-text stop
    kw = dict(max_new_tokens=n, do_sample=False, pad_token_id=tok.eos_token_id, eos_token_id=None,
              temperature=None, top_k=None, top_p=None)

    def plain_hook(module, inputs, output):
        if isinstance(output, torch.Tensor):
            return output + alpha * vector
        return (output[0] + alpha * vector, *output[1:])

    def hooked():
        handle = block.register_forward_hook(plain_hook)
        try:
            with torch.no_grad():
                return m.generate(ids, attention_mask=torch.ones_like(ids), **kw)[0, ids.shape[1]:]
        finally:
            handle.remove()

    def bare():
        with torch.no_grad():
            return m.generate(ids, attention_mask=torch.ones_like(ids), **kw)[0, ids.shape[1]:]

    edits = [ilab.steer("resid_post", layer, vector, alpha=alpha)]
    ways = {
        "model.generate, no hook": bare,
        "model.generate + a plain hook": hooked,
        "lab.generate, no edit": lambda: lab.generate(prompt, [], max_new_tokens=n, stop_at_eos=False).ids[0],
        "lab.generate + ilab.steer": lambda: lab.generate(prompt, edits, max_new_tokens=n, stop_at_eos=False).ids[0],
    }
    times = {k: [] for k in ways}
    out = {}
    for k, fn in ways.items():  # warm-up
        out[k] = fn()
    for _ in range(args.repeats):
        for k, fn in ways.items():
            t0 = time.process_time()  # CPU time: one torch thread, so the work done, whatever the machine's load
            fn()
            times[k].append(time.process_time() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    base = med["model.generate, no hook"]
    same = out["lab.generate + ilab.steer"].tolist() == out["model.generate + a plain hook"].tolist()
    device = "cuda" if args.device.startswith("cuda") else "cpu"
    rows = [
        f"ioi-tiny (4-layer GPT-2, d_model {lab.d_model}), one prompt of {ids.shape[1]} tokens, {n} new tokens, "
        f"greedy, a steer of resid_post layer {layer} (alpha {alpha}) at every position; "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch threads "
        f"{torch.get_num_threads()}, torch {torch.__version__}; median CPU time of {args.repeats} interleaved rounds.",
        f"Command: `python benchmarks/bench_generate.py --vs-hook --repeats {args.repeats}`.",
        "",
        "| way | median CPU ms | ms per step over bare generate | vs the plain hook's |",
        "|---|---|---|---|",
    ]
    hook_step = (med["model.generate + a plain hook"] - base) / n
    for k in ways:
        step = (med[k] - base) / n
        ratio = "" if k == "model.generate, no hook" else f"{med[k] / med['model.generate + a plain hook']:.2f}x"
        rows.append(f"| {k} | {med[k] * 1e3:.1f} | {step * 1e3:+.3f} | {ratio} |")
    steer_step = (med["lab.generate + ilab.steer"] - med["lab.generate, no edit"]) / n
    rows += ["", f"The steer's own cost per step (lab.generate + steer minus lab.generate with no edit): "
                 f"{steer_step * 1e3:+.3f} ms; the plain hook's (over bare generate): {hook_step * 1e3:+.3f} ms. "
                 f"Same token ids, steer and plain hook: {same}."]
    print("\n".join(rows))
    if not args.no_write:
        write_section(f"Steered generation per step vs a plain hook ({device})", rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--vs-hook", action="store_true", help="a steer's per-step cost against a plain hook (no vLLM)")
    args = ap.parse_args()
    if args.vs_hook:
        vs_hook(args)
        return

    m = model(args.quick).to(args.device)
    n_params = sum(p.numel() for p in m.parameters())
    lab = ilab.Lab(m, gpt2_tokenizer(), model_id="random-llama")
    t0 = time.perf_counter()
    lab.use_vllm()
    start = time.perf_counter() - t0
    ps = prompts(args.prompts)
    mid = lab.n_layers // 2
    vector = torch.randn(lab.d_model, generator=torch.Generator().manual_seed(0))
    vector = vector / vector.norm() * lab.residual_norm("resid_post", mid)
    edits = [ilab.steer("resid_post", mid, vector, alpha=2.0)]

    def run(backend):
        return lambda: lab.generate(ps, edits, max_new_tokens=args.new_tokens, stop_at_eos=False, backend=backend)

    hf_s, hf = timed(run("hf"), args.repeats)
    vl_s, vl = timed(run("vllm"), args.repeats)
    # what the edits cost on vLLM, and vLLM's own speed with no interplab in the way (the ceiling of the ratio)
    plain_s, _ = timed(lambda: lab.generate(ps, [], max_new_tokens=args.new_tokens, stop_at_eos=False,
                                            backend="vllm"), args.repeats)
    from vllm import SamplingParams

    ids = [lab.to_tokens(p)[0].tolist() for p in ps]
    raw = SamplingParams(max_tokens=args.new_tokens, temperature=0.0, ignore_eos=True, detokenize=False)
    raw_s, _ = timed(lambda: lab.engine.vllm.llm.generate([{"prompt_token_ids": i} for i in ids], raw, use_tqdm=False),
                     args.repeats)
    same = sum(a == b for a, b in zip(hf.ids.tolist(), vl.ids.tolist()))
    tokens = args.prompts * args.new_tokens
    device = "cuda" if args.device.startswith("cuda") else "cpu"
    threads = torch.get_num_threads()
    rows = [
        f"{n_params / 1e6:.0f}M-parameter random Llama (fp32), {args.prompts} prompts x {args.new_tokens} new tokens, "
        f"one steer at resid_post layer {mid}, greedy; {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, torch threads {threads}.",
        "Command: `build/venv-vllm/bin/python benchmarks/bench_generate.py" + (" --quick" if args.quick else "")
        + (f" --device {args.device}" if device == "cuda" else "") + "`.",
        "",
        "| engine | median seconds | tokens / s | vs HF |",
        "|---|---|---|---|",
        f"| Hugging Face generate | {hf_s:.2f} | {tokens / hf_s:.0f} | 1.0x |",
        f"| vLLM engine | {vl_s:.2f} | {tokens / vl_s:.0f} | **{hf_s / vl_s:.1f}x** |",
        f"| vLLM engine, no edit | {plain_s:.2f} | {tokens / plain_s:.0f} | {hf_s / plain_s:.1f}x |",
        f"| vLLM alone (`llm.generate`, no interplab) | {raw_s:.2f} | {tokens / raw_s:.0f} | {hf_s / raw_s:.1f}x |",
        "",
        f"Same ids on both engines: {same} of {args.prompts} rows. vLLM engine start: {start:.1f} s (once per lab).",
    ]
    print("\n".join(rows))
    if not args.no_write and not args.quick:
        write_section(f"Steered generation, HF vs vLLM ({device})", rows)
    lab.engine.vllm.close()


if __name__ == "__main__":  # (vLLM may start worker processes, which import this file)
    main()
