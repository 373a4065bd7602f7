"""Where: canonical site names (TransformerLens vocabulary) mapped onto the model's own module tree.

A site resolves to a *hook point*: a module path, whether we read its input (forward pre-hook) or its output
(forward hook), and which element of a tuple holds the tensor. Nothing here touches tensors.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import nn

from .errors import OutOfRangeError, UnknownSiteError, UnsupportedSiteError


def refuse_tuple_layer(layer, name: str = "layer") -> None:
    """A tuple where a layer goes is refused, never read as several layers: it is most often a (layer, head) pair,
    such as a head from a list of heads (several layers are a list)."""
    if isinstance(layer, tuple):
        pair = f" (layer={layer[0]!r}, head={layer[1]!r})" if len(layer) == 2 else ""
        raise OutOfRangeError(f"{name}={layer!r} is a tuple: a (layer, head) pair goes in two arguments{pair}; "
                              f"several layers go in a list, {name}={list(layer)!r}.")


PROBES = "interplab_probes"  # the submodule of each attention module that rot_q, rot_k and pattern pass through

# Notes: `embed` is the token embedding only (GPT-2 adds position embeddings inside the model's forward);
# `mlp_in` is what the MLP reads (after the block's norm in front of it: GPT-2's ln_2), where a transcoder reads;
# `logits` is the unembedding's output, before any final soft-capping (Gemma 2), while run.logits are the model's.
# q, k, v are each head's query, key and value as the projections make them (TransformerLens's hook_q/k/v: before
# any rotary embedding; k and v have the model's key-value heads, fewer than its query heads under grouped-query
# attention); rot_q, rot_k are the query and key after the rotary embedding, where a model applies one; pattern is
# the attention weights [batch, head, query pos, key pos], editable: a head's output is its edited pattern times v.
# mlp_pre and mlp_post are the MLP's hidden units [batch, pos, d_mlp] (TransformerLens's mlp.hook_pre / hook_post):
# mlp_pre before the activation function (a gated MLP's gate projection), mlp_post what the down projection reads
# (the activation's output; a gated MLP's act(gate) * up). Edits select units with neuron=.
SITE_NAMES = ("embed", "resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_in", "mlp_out", "mlp_pre",
              "mlp_post", "z", "q", "k", "v", "rot_q", "rot_k", "pattern", "logits")
LAYERED = {"resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_in", "mlp_out", "mlp_pre", "mlp_post", "z", "q",
           "k", "v", "rot_q", "rot_k", "pattern"}
NEURONS = {"mlp_pre", "mlp_post"}  # sites whose last dimension is the MLP's neurons (edits' neuron=)
HEADED = {"z", "q", "k", "v", "rot_q", "rot_k", "pattern"}
KV_HEADED = {"k", "v", "rot_k"}  # sites with the model's key-value heads (num_key_value_heads)
# Sites read inside the attention function: their values exist only there, and k/rot_k/pattern span the key
# positions, so they are read and edited in full forwards (no key-value cache; see interplab.engine.attention).
IN_ATTENTION = {"rot_q", "rot_k", "pattern"}
FULL_FORWARD = {"rot_k", "pattern"}


@dataclass(frozen=True)
class HookPoint:
    """A concrete place to hook: module path, 'input' or 'output', and the tuple element holding the tensor.

    plus_input_of names a module whose input is added to that tensor to give the site's value. No module outputs
    the mid-layer residual (the block adds attention's output to its input inline), so resid_mid is read and
    written where attention's contribution leaves: value = residual + attn_out, and an edit of the value becomes
    attn_out' = edited - residual, which the block's own add turns back into the edited residual. Every later
    reader (the MLP, the skip connection, later layers) then sees the edit."""

    module: str
    io: str  # "input" | "output"
    index: int = 0  # element of a tuple input/output
    plus_input_of: str | None = None  # a module whose input is the residual stream entering this sublayer
    layout: Layout | None = None  # where the site is a part of the tensor, or laid out [.., head, d_head]


@dataclass(frozen=True)
class Layout:
    """How a site's [batch, pos, heads * d_head] value sits in the hooked tensor.

    kind "bthd": the tensor is [batch, pos, head, d_head]; "bhtd": [batch, head, pos, d_head]; "third": the
    site is part `part` of three equal parts of the last dim (GPT-2's fused q|k|v); "head_third": the last dim is
    [head, 3 * d_head] and the site is part `part` of each head's three (GPT-NeoX's fused projection)."""

    kind: str
    part: int = 0
    n_heads: int = 0


@dataclass(frozen=True)
class Arch:
    """Module paths of one architecture family. '{}' stands for the layer number."""

    name: str
    layers: str
    embed: str
    final_norm: str
    unembed: str
    attn: str
    mlp: str
    o_proj: str
    attn_in: str | None  # first module of the block whose input is resid_pre (None: no mid-layer residual)
    attn_out: HookPoint | None = None  # override when the attention output is normalised before the add
    mlp_out: HookPoint | None = None
    # the MLP's hidden units, relative to the block: before the activation (mlp_pre) and what the down projection
    # reads (mlp_post); None where there is no one hidden layer (mixture-of-experts blocks: see notes)
    mlp_pre: HookPoint | None = None
    mlp_post: HookPoint | None = None
    notes: dict[str, str] = field(default_factory=dict)
    # q, k, v before any rotary embedding, relative to the block: (module, layout kind); "third"/"head_third"
    # name a fused projection. None: separate q_proj/k_proj/v_proj outputs under `attn`.
    qkv: tuple[tuple[str, str | None], tuple[str, str | None], tuple[str, str | None]] | None = None
    rotary: bool = True


_GPT2 = Arch("gpt2", "transformer.h", "transformer.wte", "transformer.ln_f", "lm_head",
             attn="attn", mlp="mlp", o_proj="attn.c_proj", attn_in="ln_1",
             mlp_pre=HookPoint("mlp.c_fc", "output"), mlp_post=HookPoint("mlp.c_proj", "input"),
             qkv=(("attn.c_attn", "third"),) * 3, rotary=False)
_NEOX = Arch("gpt_neox", "gpt_neox.layers", "gpt_neox.embed_in", "gpt_neox.final_layer_norm", "lm_head",
             attn="attention", mlp="mlp", o_proj="attention.dense", attn_in="input_layernorm",
             mlp_pre=HookPoint("mlp.dense_h_to_4h", "output"), mlp_post=HookPoint("mlp.dense_4h_to_h", "input"),
             qkv=(("attention.query_key_value", "head_third"),) * 3)
_NEOX_PARALLEL = Arch(**{**_NEOX.__dict__, "attn_in": None, "notes": {
    "resid_mid": "this GPT-NeoX model uses a parallel residual (use_parallel_residual=True): attention and MLP "
                 "both read resid_pre, so there is no mid-layer residual. Use resid_pre, attn_out or mlp_out."}})
# A gated MLP (Llama and its kin): down_proj(act(gate_proj(x)) * up_proj(x)); mlp_pre is the gate before act.
_GATED = dict(mlp_pre=HookPoint("mlp.gate_proj", "output"), mlp_post=HookPoint("mlp.down_proj", "input"))
_LLAMA = Arch("llama", "model.layers", "model.embed_tokens", "model.norm", "lm_head",
              attn="self_attn", mlp="mlp", o_proj="self_attn.o_proj", attn_in="input_layernorm", **_GATED)
_MOE_NOTES = {n: "this mixture-of-experts block routes each token to some of its experts, each an MLP of its own, "
                 "so there is no one hidden layer of neurons. Use mlp_out, or one expert's raw module path (e.g. "
                 "'model.layers.0.mlp.experts.0.down_proj.input'; lab.engine.module_names())." for n in NEURONS}
_MOE = {"mlp_pre": None, "mlp_post": None, "notes": _MOE_NOTES}
# Gemma 2/3 normalise each sublayer's output before adding it to the stream: the stream sees the norm's output.
_GEMMA2 = Arch("gemma2", "model.layers", "model.embed_tokens", "model.norm", "lm_head",
               attn="self_attn", mlp="mlp", o_proj="self_attn.o_proj", attn_in="input_layernorm", **_GATED,
               attn_out=HookPoint("post_attention_layernorm", "output"),
               mlp_out=HookPoint("post_feedforward_layernorm", "output"))
# OLMo 2 normalises sublayer outputs too, and has no norm in front of attention: attention reads the stream itself.
# OLMo 2 normalises the whole query and key projections (q_norm, k_norm), before the rotary embedding.
_OLMO2 = Arch(**{**_GEMMA2.__dict__, "name": "olmo2", "attn_in": "self_attn",
                 "qkv": (("self_attn.q_norm", None), ("self_attn.k_norm", None), ("self_attn.v_proj", None))})
# Qwen 3 normalises each head's query and key ([batch, pos, head, d_head]); Gemma 3 after moving heads first.
_QK_NORM_BTHD = (("self_attn.q_norm", "bthd"), ("self_attn.k_norm", "bthd"), ("self_attn.v_proj", None))
_QK_NORM_BHTD = (("self_attn.q_norm", "bhtd"), ("self_attn.k_norm", "bhtd"), ("self_attn.v_proj", None))

ARCHS: dict[str, Arch] = {
    "gpt2": _GPT2,
    "gpt_neox": _NEOX,
    **{t: Arch(**{**_LLAMA.__dict__, "name": t}) for t in ("llama", "mistral", "qwen2", "gemma")},
    **{t: Arch(**{**_LLAMA.__dict__, **_MOE, "name": t}) for t in ("qwen2_moe", "mixtral")},
    "qwen3": Arch(**{**_LLAMA.__dict__, "name": "qwen3", "qkv": _QK_NORM_BTHD}),
    "qwen3_moe": Arch(**{**_LLAMA.__dict__, **_MOE, "name": "qwen3_moe", "qkv": _QK_NORM_BTHD}),
    "olmo2": _OLMO2,
    "gemma2": _GEMMA2,
    "gemma3_text": Arch(**{**_GEMMA2.__dict__, "name": "gemma3_text", "qkv": _QK_NORM_BHTD}),
}


def detect_arch(model: nn.Module) -> Arch | None:
    """The architecture adapter for this model, from its config; None when unknown (raw paths still work)."""
    cfg = getattr(model, "config", None)
    model_type = getattr(cfg, "model_type", None)
    arch = ARCHS.get(model_type)
    if arch is not None and arch.name == "gpt_neox" and getattr(cfg, "use_parallel_residual", False):
        arch = _NEOX_PARALLEL
    return arch


@dataclass(frozen=True)
class Site:
    """A resolved site: canonical name (or raw path), layer, and the hook point it lives on."""

    name: str
    layer: int | None
    point: HookPoint
    heads: bool = False  # last dim splits into [n_heads, d_head]
    n_heads: int | None = None  # heads of this site (key-value heads for k, v, rot_k)


def _get_module(model: nn.Module, path: str) -> nn.Module:
    try:
        return model.get_submodule(path)
    except AttributeError:
        return None  # type: ignore[return-value]


class SiteMap:
    """Resolves site names on one model. Built once per Lab."""

    def __init__(self, model: nn.Module):
        self.model = model
        self.arch = detect_arch(model)
        cfg = getattr(model, "config", None)
        self.n_layers = self._count_layers()
        self.n_heads = getattr(cfg, "num_attention_heads", None) or getattr(cfg, "n_head", None)
        self.n_kv_heads = getattr(cfg, "num_key_value_heads", None) or self.n_heads
        self.d_model = getattr(cfg, "hidden_size", None) or getattr(cfg, "n_embd", None)
        head_dim = getattr(cfg, "head_dim", None)
        if not head_dim and self.n_heads and self.d_model:
            head_dim = self.d_model // self.n_heads
        self.d_head = head_dim
        # the MLP's hidden width (neurons per layer); GPT-2 leaves n_inner None for 4 * n_embd
        self.d_mlp = getattr(cfg, "intermediate_size", None) or getattr(cfg, "n_inner", None) or (
            4 * self.d_model if self.arch is not None and self.arch.name == "gpt2" and self.d_model else None)
        # Embedding and unembedding found by identity: their attribute names move between versions.
        self.embed_path = self._path_of(getattr(model, "get_input_embeddings", lambda: None)())
        self.unembed_path = self._path_of(getattr(model, "get_output_embeddings", lambda: None)())

    def _path_of(self, module) -> str | None:
        if module is None:
            return None
        return next((n for n, m in self.model.named_modules() if m is module), None)

    def _count_layers(self) -> int | None:
        if self.arch is None:
            return None
        layers = _get_module(self.model, self.arch.layers)
        return len(layers) if layers is not None else None

    # ---- canonical names -> hook points -------------------------------------------------------------
    def point(self, name: str, layer: int | None = None) -> HookPoint:
        a = self.arch
        if name not in SITE_NAMES:
            return self._raw_point(name, layer)
        if a is None:
            model_type = getattr(getattr(self.model, "config", None), "model_type", type(self.model).__name__)
            raise UnsupportedSiteError(
                f"site {name!r}: interplab has no site map for architecture {model_type!r}. Supported: "
                f"{', '.join(sorted(ARCHS))}. Use a raw module path instead, e.g. 'model.layers.3.mlp.output' "
                f"(see lab.engine.module_names())."
            )
        if name == "embed":
            return HookPoint(self.embed_path or a.embed, "output")
        if name == "logits":
            return HookPoint(self.unembed_path or a.unembed, "output")
        layer = self.layer_index(layer, name)
        block = f"{a.layers}.{layer}"
        if name == "resid_pre":
            return HookPoint(block, "input")
        if name == "resid_post":
            return HookPoint(block, "output")
        if name == "resid_mid":  # resid_pre + attn_out, at the point where attention's output leaves
            if a.attn_in is None:
                raise UnsupportedSiteError(f"site 'resid_mid': {a.notes.get('resid_mid', 'not available here')}")
            out = self.point("attn_out", layer)
            return HookPoint(out.module, out.io, out.index, plus_input_of=f"{block}.{a.attn_in}")
        if name == "attn_out":
            p = a.attn_out or HookPoint(a.attn, "output", 0)
            return HookPoint(f"{block}.{p.module}", p.io, p.index)
        if name == "mlp_in":
            return HookPoint(f"{block}.{a.mlp}", "input")
        if name == "mlp_out":
            p = a.mlp_out or HookPoint(a.mlp, "output", 0)
            return HookPoint(f"{block}.{p.module}", p.io, p.index)
        if name in NEURONS:
            p = a.mlp_pre if name == "mlp_pre" else a.mlp_post
            if p is None:
                raise UnsupportedSiteError(f"site {name!r}: {a.notes.get(name, 'not mapped on ' + a.name)}")
            return HookPoint(f"{block}.{p.module}", p.io, p.index)
        if name == "z":
            return HookPoint(f"{block}.{a.o_proj}", "input")
        if name in ("q", "k", "v"):
            part = "qkv".index(name)
            module, kind = a.qkv[part] if a.qkv else (f"{a.attn}.{name}_proj", None)
            heads = self.n_heads if name == "q" else self.n_kv_heads
            layout = Layout(kind, part, heads) if kind else None
            return HookPoint(f"{block}.{module}", "output", layout=layout)
        if name in IN_ATTENTION:
            if name in ("rot_q", "rot_k") and not a.rotary:
                raise UnsupportedSiteError(
                    f"site {name!r}: this {a.name} model has no rotary embedding, so attention uses "
                    f"{name[-1]!r} itself: use site {name[-1]!r}.")
            return HookPoint(f"{block}.{a.attn}.{PROBES}.{name}", "output")
        raise AssertionError(name)

    def _raw_point(self, path: str, layer: int | None) -> HookPoint:
        """'transformer.h.3.mlp.output' / '.input', or with '{layer}' filled from the layer argument."""
        if "{layer}" in path:
            if layer is None:
                raise UnknownSiteError(f"site {path!r} has a '{{layer}}' placeholder: pass layer=<int>.")
            path = path.replace("{layer}", str(layer))
        io = "output"
        module = path
        for suffix in (".output", ".input"):
            if path.endswith(suffix):
                module, io = path[: -len(suffix)], suffix[1:]
        if _get_module(self.model, module) is None:
            raise UnknownSiteError(
                f"unknown site {path!r}: not a canonical site ({', '.join(SITE_NAMES)}) and no module "
                f"{module!r} in this model. Raw paths look like 'transformer.h.3.mlp.output' or "
                f"'model.layers.3.mlp.input'; lab.engine.module_names() lists the modules."
            )
        return HookPoint(module, io)

    def resolve(self, name: str, layer: int | None) -> Site:
        point = self.point(name, layer)
        canonical = name in SITE_NAMES
        if canonical and name in LAYERED:
            layer = self.layer_index(layer, name)
        heads = canonical and name in HEADED
        n_heads = (self.n_kv_heads if name in KV_HEADED else self.n_heads) if heads else None
        return Site(name, layer if canonical and name in LAYERED else None, point, heads=heads, n_heads=n_heads)

    # ---- ranges -------------------------------------------------------------------------------------
    def layer_index(self, layer, name: str = "site") -> int:
        """A layer argument as a layer number: 0..n-1, or -n..-1 counted from the end (-1: the last layer), the
        one rule for edits, caches, sweeps and views. The error names the value passed."""
        n = self.n_layers
        if layer is None:
            raise OutOfRangeError(f"site {name!r} needs a layer: pass layer=0..{n - 1} (or -{n}..-1 from the end).")
        refuse_tuple_layer(layer)
        if not isinstance(layer, int) or isinstance(layer, bool):
            raise OutOfRangeError(f"layer must be an int, got {layer!r}.")
        if not -n <= layer < n:
            raise OutOfRangeError(f"layer={layer} out of range: this model has {n} layers (0..{n - 1}, or -{n}..-1 "
                                  f"from the end).")
        return layer % n

    def check_layer(self, layer, name: str = "site") -> None:
        self.layer_index(layer, name)

    def check_head(self, head: int, n: int | None = None) -> None:
        n = n or self.n_heads
        if isinstance(head, bool) or not isinstance(head, int) or not 0 <= head < n:
            what = "heads per layer" if n == self.n_heads else "key-value heads per layer (k, v and rot_k)"
            raise OutOfRangeError(f"head {head} out of range: this model has {n} {what} (0..{n - 1}).")

    def layers_of(self, layer) -> list[int]:
        """An int, list, range, slice or None (= all layers) as a list of layer numbers, each checked (a tuple is
        refused: it is most often a (layer, head) pair)."""
        if layer is None:
            return list(range(self.n_layers))
        if isinstance(layer, slice):
            return list(range(self.n_layers))[layer]
        refuse_tuple_layer(layer)
        if isinstance(layer, (list, range)):
            out = [int(x) for x in layer]
        else:
            out = [layer]
        return [self.layer_index(x) for x in out]  # -1 = the last layer

    def heads_of(self, head, n: int | None = None) -> list[int] | None:
        """An int, list, slice or None (= all) as head numbers, each checked against n heads (default: the
        model's query heads)."""
        n = n or self.n_heads
        if head is None:
            return None
        if isinstance(head, slice):
            return list(range(n))[head]
        out = list(head) if isinstance(head, (list, tuple, range)) else [head]
        for h in out:
            self.check_head(h, n)
        return out

    def neurons_of(self, neuron) -> list[int] | None:
        """An int, list, slice or None (= all) as neuron numbers of the MLP's hidden layer, each checked."""
        n = self.d_mlp
        if neuron is None or n is None:
            return None
        if isinstance(neuron, slice):
            return list(range(n))[neuron]
        out = list(neuron) if isinstance(neuron, (list, tuple, range)) else [neuron]
        for i in out:
            if isinstance(i, bool) or not isinstance(i, int) or not -n <= i < n:
                raise OutOfRangeError(f"neuron {i!r} out of range: this model's MLPs have {n} neurons (0..{n - 1}, "
                                      f"or -{n}..-1).")
        return [i % n for i in out]

    def describe(self) -> dict:
        """Every canonical site and where it lives on this model (or why it is missing)."""
        out = {}
        for name in SITE_NAMES:
            try:
                p = self.point(name, 0 if name in LAYERED else None)
                where = f"{p.module}.{p.io}" + (f"[{p.index}]" if p.index else "")
                out[name] = f"{p.plus_input_of}.input + {where}" if p.plus_input_of else where
            except UnsupportedSiteError as e:
                out[name] = f"unavailable: {e}"
        return out
