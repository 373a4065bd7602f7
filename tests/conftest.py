"""Shared fixtures: tiny random-init models of every supported architecture, with a small byte-level tokenizer."""

import importlib.util
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402
from _tiny_models import ARCHS, CORPUS, make_model  # noqa: E402  (re-exported: `from conftest import` still works)

torch.set_num_threads(1)

# tests/vllm_engine/ runs in the vLLM environment that scripts/vllm.sh builds (bash scripts/test.sh runs it after
# these). (Not named tests/vllm: with tests/ on sys.path, that folder would import as a namespace package "vllm".)
collect_ignore = [] if importlib.util.find_spec("vllm") is not None else ["vllm_engine"]
# tests/saelens_ref/ runs in SAELens's environment (scripts/saelens.sh), after these
collect_ignore += [] if importlib.util.find_spec("sae_lens") is not None else ["saelens_ref"]
# tests/circuit_tracer_ref/ runs there too (scripts/circuit_tracer.sh)
collect_ignore += [] if importlib.util.find_spec("circuit_tracer") is not None else ["circuit_tracer_ref"]
# tests/sae_dashboard_ref/ runs in sae-dashboard's own environment (scripts/sae_dashboard.sh)
collect_ignore += [] if importlib.util.find_spec("sae_dashboard") is not None else ["sae_dashboard_ref"]


@pytest.fixture(scope="session")
def tokenizer():
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(CORPUS, vocab_size=320, min_frequency=1, special_tokens=["<|endoftext|>"])
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, eos_token="<|endoftext|>",
                                  bos_token="<|endoftext|>", pad_token="<|endoftext|>")
    return tok


@pytest.fixture(scope="session")
def models():
    return {a: make_model(a) for a in ARCHS + ["gpt_neox_parallel"]}


_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")


def model_state(model) -> dict:
    """What a test must leave as it found it on a shared model: hooks (anyone's: a later test may count them),
    modules, config (attention implementation, output flags), modes, and parameters (identity, dtype, norm)."""
    ts = list(model.state_dict(keep_vars=True).items())
    return {
        "hooks": [(n, d, k) for n, m in model.named_modules() for d in _HOOK_DICTS for k in getattr(m, d)],
        "modules": [(n, type(m).__name__, m.training) for n, m in model.named_modules()],
        "config": (model.config._attn_implementation, model.config.to_dict()),
        "tensors": [(k, id(t), t.dtype, t.device, t.requires_grad, getattr(t, "grad", None) is None) for k, t in ts],
        "norms": torch.stack(torch._foreach_norm([t.detach().float() for _, t in ts])).tolist(),
        "output_capturing": getattr(model, "_output_capturing_hooks_installed", False),
    }


def _global_state(tokenizer=None) -> dict:
    import sys

    from torch.nn.modules import module as nn_module

    hooks = {d: list(getattr(nn_module, d)) for d in dir(nn_module) if d.startswith("_global_") and d.endswith("hooks")}
    tok = None if tokenizer is None else (tokenizer.padding_side, tokenizer.truncation_side, len(tokenizer),
                                          tokenizer.pad_token, tokenizer.bos_token, tokenizer.eos_token)
    # interplab's hooks on any model (a later test may assert there are none); not imported here: the widget tests
    # must run while interplab itself does not import
    live = getattr(sys.modules.get("interplab"), "attached_hooks", None)
    return {"global hooks": hooks, "threads": torch.get_num_threads(), "grad enabled": torch.is_grad_enabled(),
            "default dtype": torch.get_default_dtype(), "tokenizer": tok,
            "interplab hooks": sorted(map(repr, live())) if live is not None else []}


@pytest.fixture(autouse=True)
def _no_state_leaks_between_tests(request):
    """Tests run in random order (pytest-randomly): each one gets torch's RNG seeded the same way whatever ran before,
    and must leave the session's shared models, tokenizer and torch's global state unchanged. A test that needs
    output_hidden_states / output_attentions (transformers then installs hooks for good), another attention
    implementation or another config builds its own model (make_model) or restores what it changed."""
    torch.manual_seed(0)
    shared = request.getfixturevalue("models") if "models" in request.fixturenames else {}
    tok = request.getfixturevalue("tokenizer") if "tokenizer" in request.fixturenames else None
    before = ({a: model_state(m) for a, m in shared.items()}, _global_state(tok))
    yield
    after = ({a: model_state(m) for a, m in shared.items()}, _global_state(tok))
    changed = [f"{a}: {k}" for a in before[0] for k in before[0][a] if before[0][a][k] != after[0][a][k]]
    changed += [k for k in before[1] if before[1][k] != after[1][k]]
    assert not changed, f"the test changed shared state that later tests see: {changed}"


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
