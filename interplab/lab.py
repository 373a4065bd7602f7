"""Who: the Lab a notebook holds - the face of an Engine (model, tokenizer, runs, memo, log), with the analyses and
views on top.

    lab = ilab.Lab.load("ioi-tiny")
    run = lab.run("When Mary and John went to the store, John gave a drink to", cache=["resid_post"])
    run.cache["resid_post", 3]
    lab.patch_sweep(clean, corrupt, metric=ilab.logit_diff(" Mary", " John")).show()

The Lab is the facade: it holds the engine (`lab.engine`, the plumbing: memo, worker, plans, hooks) and delegates
to the analyses and views, which take the engine and never import the Lab back. Its public names are what a
notebook needs; the engine's own are the engine's (lab.engine.clear_memo()).
"""

from __future__ import annotations

import contextlib
import os

from .analyses import dla, ov, paths, steering
from .analyses import features as _features
from .analyses.edges import circuit, edge_attribution, edge_patch
from .analyses.patching import patch_sweep, patch_sweep_heads
from .engine import Cache, Engine, InterventionLog, Run  # noqa: F401 (interplab.lab's public names)
from .errors import InterplabError, LoadError, UnknownSiteError  # noqa: F401
from .loading import embedded_path, load_pretrained
from .views import KINDS  # noqa: F401 (importing the views registers what res.show() opens)
from .views.attention import attention_widget
from .views.dashboard import Dashboard
from .views.lens import lens_widget
from .views.steering import steering_panel
from .widgets.base import resend_states
from .worker import join_all


class Lab:
    """Drives one model and tokenizer. Build it with Lab.load(name) or Lab(model, tokenizer)."""

    def __init__(self, model, tokenizer, **kw):
        self.engine = Engine(model, tokenizer, **kw)

    # ---- the model in hand ----------------------------------------------------------------------------
    @property
    def model(self):
        """The Hugging Face model (a torch.nn.Module), exactly as loaded: interplab's hooks are attached only while
        it runs an edit, or while edits are bound (lab.bind)."""
        return self.engine.model

    @property
    def tokenizer(self):
        """The model's tokenizer (read, never changed)."""
        return self.engine.tokenizer

    @property
    def model_id(self) -> str:
        """The name the model was loaded by (a hub id, a folder, 'ioi-tiny')."""
        return self.engine.model_id

    @property
    def sites(self):
        """The site names on this model (lab.sites.describe() shows where each lives in its module tree)."""
        return self.engine.sites

    @property
    def log(self):
        """Every run this session asked for, in order; lab.log.to_code() is the session as runnable Python."""
        return self.engine.log

    @property
    def n_layers(self) -> int:
        """The number of transformer blocks."""
        return self.engine.n_layers

    @property
    def n_heads(self) -> int:
        """Attention heads per layer."""
        return self.engine.n_heads

    @property
    def d_model(self) -> int:
        """The width of the residual stream."""
        return self.engine.d_model

    def hooks(self) -> list[dict]:
        """The hooks interplab has attached right now: empty between runs, unless edits are bound (lab.bind)."""
        return self.engine.hooks()

    def to_tokens(self, prompts):
        """Token ids [batch, pos] of a prompt or a list of prompts, padded as every run pads them."""
        return self.engine.to_tokens(prompts)

    def to_str_tokens(self, prompt: str) -> list[str]:
        """A prompt's tokens as strings, one per position, as every view labels them: a piece of a character that
        several tokens make reads as the character and its own bytes ('😀 <F0 9F>'), never U+FFFD."""
        return self.engine.to_str_tokens(prompt)

    def to_string(self, ids) -> str:
        """Token ids back to text."""
        return self.engine.to_string(ids)

    def token_id(self, token) -> int:
        """The id of a single-token string (" Mary"), or an id checked against the vocabulary."""
        return self.engine.token_id(token)

    def check_pair(self, clean, corrupt) -> None:
        """Raise, showing both tokenizations, unless the clean and corrupt prompts have the same token length (a
        patch moves position i of one run into position i of the other)."""
        self.engine.check_pair(clean, corrupt)

    def run(self, prompts, edits=None, cache=None, *, grad: bool = False, log: bool = True):
        """One forward of the prompts with `edits` applied, reading the `cache` sites: a Run (run.logits,
        run.cache["resid_post", 2]). Remembered: the same request again is answered without a forward."""
        return self.engine.run(prompts, edits, cache, grad=grad, log=log)

    # ---- loading --------------------------------------------------------------------------------------
    @classmethod
    def load(cls, name: str = "ioi-tiny", *, device=None, dtype=None, trust_remote_code: bool = False,
             allow_pickle: bool = False, attn_implementation: str = "eager", progress: bool = False,
             device_map=None, offload_folder=None, max_memory=None, engine: str = "hf", vllm_options=None,
             **kw) -> Lab:
        """Load an embedded model ('ioi-tiny'), a Hugging Face hub id ('gpt2') or a local directory.

        Only safetensors weights are loaded unless allow_pickle=True; remote code only with trust_remote_code=True.
        Eager attention is the default so that attention patterns can be read. progress=True shows transformers'
        weight-loading bar (hidden by default; a real download keeps its own bar either way). A hub id is read from
        the local cache first; if it is not there and the hub cannot be reached, this fails within about a second.

        A model bigger than one device: device_map="auto" (or a dict {module path: device, "cpu" or "disk"}),
        with max_memory ({device: "20GiB", "cpu": "60GiB"}) and offload_folder (where "disk" weights go), is passed
        to transformers' from_pretrained, which spreads the layers through accelerate (pip install
        'interplab[big]'). Edits, sweeps and clicks work on such a model as on one device (docs/SCALE.md).

        engine="vllm" also starts a vLLM engine on the same weights (lab.use_vllm(**vllm_options)): generation,
        lab.sample and backend="vllm" sweeps then run there (pip install 'interplab[vllm]'; interplab.engine.vllm).
        """
        if engine not in ("hf", "vllm"):
            raise LoadError(f"engine={engine!r}: 'hf' (the Hugging Face model only) or 'vllm' (plus a vLLM engine).")
        model, tokenizer, name, path, placement = load_pretrained(
            name, device=device, dtype=dtype, trust_remote_code=trust_remote_code, allow_pickle=allow_pickle,
            attn_implementation=attn_implementation, progress=progress, device_map=device_map,
            offload_folder=offload_folder, max_memory=max_memory)
        lab = cls(model, tokenizer, model_id=name, **kw)
        lab.engine.load_options = placement  # (the log's to_code() loads the same way)
        if engine == "vllm":
            lab.use_vllm(path if os.path.isdir(path) else name, **(vllm_options or {}))
        return lab

    def use_vllm(self, path: str | None = None, **options):
        """Start a vLLM engine on this lab's model (in this process) and return it: lab.generate, lab.sample and
        lab.patch_sweep(..., backend="vllm") then run on it. path: the model's directory or hub id (default: an
        embedded model's own directory, else this model saved to a temporary directory). options go to
        interplab.engine.vllm.VLLMBackend (prefix_caching, kv_cache_gib, cache_dir, max_num_seqs, ...)."""
        return self.engine.use_vllm(embedded_path(self.model_id) if path is None else path, **options)

    def sample(self, prompts, edits=None, **kw):
        """n completions per prompt under edits, with log-probabilities, for evaluating an edit over many prompts
        (see interplab.engine.backends.sample)."""
        return self.engine.sample(prompts, edits, **kw)

    def patch_sweep(self, clean, corrupt=None, site: str = "resid_pre", by=("layer", "pos"), metric=None,
                    direction: str | None = None, method: str = "exact", backend: str | None = "hf", *,
                    baseline: str | None = None, reference=None, **kw):
        """Activation-patching heatmap values for every cell (see interplab.analyses.patching.patch_sweep);
        backend="vllm": each cell a request on the lab's vLLM engine. An ablation sweep: corrupt=None and
        baseline="zero", or baseline="mean" with reference=[prompts]; its values are the metric's change."""

        return patch_sweep(self.engine, clean, corrupt, site, by, metric, direction, method, backend=backend,
                           baseline=baseline, reference=reference, **kw)

    def patch_sweep_heads(self, clean, corrupt, metric, by=("layer", "head"), direction: str | None = None,
                          method: str = "exact", **kw):
        """Sweeps of every head's output, query, key, value and pattern in one call, shown side by side
        (see interplab.analyses.patching.patch_sweep_heads); corrupt=None with baseline= ablates them instead."""

        return patch_sweep_heads(self.engine, clean, corrupt, metric, by, direction, method, **kw)

    def direct_logit_attribution(self, prompts, metric):
        """Each head's, MLP's and embedding's direct share of a metric linear in the logits, at every position,
        adding up to the model's own metric (see interplab.analyses.dla)."""

        return dla.direct_logit_attribution(self.engine, prompts, metric)

    def copying_scores(self, prompts, positions, k: int = 5):
        """Every head's copying score: the share of the names at `positions` whose OV output ranks the same name
        in the top k tokens (Wang et al.'s name-mover evidence; see interplab.analyses.ov)."""

        return ov.copying_scores(self.engine, prompts, positions, k)

    def path_patch(self, clean, corrupt, metric, senders="heads", receivers="logits", direction: str = "noise",
                   **kw):
        """Each sender's effect through the receivers only, every other head frozen (see interplab.analyses.paths)."""

        return paths.path_patch(self.engine, clean, corrupt, metric, senders, receivers, direction, **kw)

    def edge_patch(self, clean, corrupt, metric, edges=None, direction: str = "denoise", **kw):
        """Each edge between components patched on its own, exactly (see interplab.analyses.edges)."""

        return edge_patch(self.engine, clean, corrupt, metric, edges, direction, **kw)

    def edge_attribution(self, clean, corrupt, metric, method: str = "eap", steps: int = 5,
                         direction: str = "denoise"):
        """Every edge's effect estimated from gradients: EAP, or EAP-IG (see interplab.analyses.edges)."""

        return edge_attribution(self.engine, clean, corrupt, metric, method, steps, direction)

    def circuit(self, clean, corrupt, metric, edges):
        """The metric with only `edges` carrying the clean run, everything else the corrupt run, and its
        faithfulness (1 = all of the clean behaviour; see interplab.analyses.edges.circuit)."""

        return circuit(self.engine, clean, corrupt, metric, edges)

    def show(self, clean: str, corrupt: str, answer, wrong, site: str = "resid_pre", by=("layer", "pos"),
             direction: str = "denoise", sweep: bool = True, progressive: bool = False):
        """The dashboard: clickable patching heatmap + logits, steering slider, logit lens, attention.
        progressive=True: the heatmap shows the attribution estimate at once, then fills in exact cells, largest
        |estimate| first (Cancel keeps them, marked partial)."""
        return Dashboard(self.engine, clean, corrupt, answer, wrong, site, by, direction, sweep, progressive)

    def lens(self, prompt: str):
        """The logit lens of a prompt as a view: each layer's top next token at each position."""
        return lens_widget(self.engine, prompt)

    def attention(self, prompt: str, layer: int = 0, head: int = 0):
        """A head's attention pattern on a prompt as a view, with a layer and head picker."""
        return attention_widget(self.engine, prompt, layer, head)

    def steering(self, prompt: str, positive: list[str], negative: list[str], site: str = "resid_post",
                 layer: int | None = None, alpha_range: tuple[float, float] = (-4.0, 4.0)):
        """The steering panel: a vector mean(positive) - mean(negative) at (site, layer), a slider for alpha with
        live next-token bars, and generation with the steer."""
        return steering_panel(self.engine, prompt, positive, negative, site, layer, alpha_range)

    # ---- generation and persistent edits: run by the engine (interplab.engine) ---------------------------------
    def generate(self, prompt, edits=None, **kw):
        """Generate text with edits active at every decoding step (see interplab.engine.generate.generate), on the
        lab's vLLM engine when it has one (backend=None; 'hf' or 'vllm' choose: interplab.engine.backends)."""
        return self.engine.generate(prompt, edits, **kw)

    def residual_norm(self, site: str = "resid_post", layer: int = 0, prompts=None) -> float:
        """Mean norm of the activation at a site: the scale to size a steering vector against."""

        return steering.residual_norm(self.engine, site, layer, prompts)

    # ---- persistent edits: hooks on the plain model until removed --------------------------------------------
    @contextlib.contextmanager
    def edit(self, edits):
        """`with lab.edit([...]):` every call of the plain model (model.generate too) runs with the edits, which
        are removed on exit, exception or not."""
        before = self.bound
        self.engine.rebind(before + list(edits))
        try:
            yield self
        finally:
            self.engine.rebind(before)

    def bind(self, edits) -> None:
        """Apply edits to every call of the plain model until lab.unbind() (adds to those already bound)."""
        self.engine.rebind(self.bound + list(edits))

    def unbind(self) -> None:
        """Remove every bound edit (and only interplab's hooks)."""
        self.engine.rebind([])

    @property
    def bound(self) -> list:
        """The edits bound to the model right now."""
        return self.engine.bound

    def __repr__(self) -> str:
        arch = self.sites.arch.name if self.sites.arch else "unknown (raw module paths only)"
        return (f"Lab({self.model_id!r}, arch={arch}, layers={self.n_layers}, heads={self.n_heads}, "
                f"d_model={self.d_model}, {self.engine.dtype_name} on {self.engine.device_name})")

    # ---- features
    def feature_acts(self, prompts, sae):
        """[batch, pos, d_sae] activations of an SAE's features on the prompts (see interplab.analyses.features)."""
        return _features.feature_acts(self.engine, prompts, sae)

    def features(self, prompt: str, sae, k: int = 5):
        """The k most active features of an SAE at each token of a prompt (see interplab.analyses.features)."""
        return _features.features(self.engine, prompt, sae, k)

    def feature(self, sae, index: int):
        """One feature of an SAE as an object: its logit effects, top contexts, activations, and the edits that
        ablate or steer it. Attribution over every feature x position: lab.patch_sweep(clean, corrupt, sae,
        ("feature", "pos"), metric, method="attribution"); each feature ablated at each position, with no corrupt
        prompt: lab.patch_sweep(clean, None, sae, ("feature", "pos"), metric, baseline="zero") (see
        interplab.analyses.features)."""
        return _features.Feature(self.engine, sae, index)



def settle(timeout: float = 600.0) -> bool:
    """Wait for every lab's pending work (sweeps, logit panels, previews started by views), then send each shown
    widget's final state again: what a notebook saved by a tool that missed the updates sent between cells (nbclient,
    `interplab export --execute`) needs to hold the final pictures. True when every worker finished in time."""
    idle = join_all(timeout)
    resend_states()
    return idle


__all__ = ["Lab", "Run", "Cache", "InterventionLog", "UnknownSiteError"]
