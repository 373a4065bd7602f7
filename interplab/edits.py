"""What: small serialisable edit specs, and how each one transforms an activation tensor.

An edit names a site, which layers / positions / heads / batch rows (and, on mlp_pre / mlp_post, which of the MLP's
neurons: neuron=) it touches, and an operation:

    patch    copy the activation of another run (or a given tensor)
    zero     set to 0
    mean     set to the mean activation of reference runs
    scale    h * factor
    steer    h + alpha * v
    project  (I - P) h + coeff * P h, P the projection onto a direction (coeff=0 ablates it)
    clamp    clamp the coefficient of h along a direction into [lo, hi]
    set      set to a given vector or tensor
    ban_expert  set one MoE expert's router logit to -inf (re-routing: interplab.analyses.steering's router hook)
    stop_grad   leave the value as it is but let no gradient flow back through it (attribution's GradDrop)

An SAE (interplab.sae.SAE) goes wherever a site name goes, with feature= (an int, list, slice or None = all): the
edit then acts on the SAE's features at its site, and the site's value becomes decode(edited features) + error,
error = x - decode(encode(x)) of the same run, computed as x + decode(f') - decode(f) (so an edit that changes no
feature leaves x bit for bit). zero / scale / set_value / patch change the selected features; steer adds alpha times
each selected feature's decoder direction.

    ilab.zero(sae, feature=12, pos=-1)    ilab.scale(sae, 2.0, feature=12)    ilab.set_value(sae, 5.0, feature=12)
    ilab.steer(sae, feature=12, alpha=4)  ilab.patch(sae, feature=12, source=lab.run(clean))

On the MLP's hidden units (mlp_pre, mlp_post: [batch, pos, d_mlp]) neuron= selects units; the operation acts on
those units alone (a steer or set_value vector: one number, one per selected neuron, or the whole d_mlp):

    ilab.zero("mlp_post", 1, neuron=7, pos=-1)    ilab.set_value("mlp_pre", 0, 3.0, neuron=[2, 5])

Selections: an int, a list, a slice, or None (= all). Positions count within each prompt's own tokens, so -1 is the
last real token of every row even when prompts of different lengths are padded into one batch.

During generation (lab.generate, bound edits) positions may also be a word (POS_SELECTORS), and `steps` limits an
edit to the tokens fed in at some decoding steps (step 0 = the prefill, i.e. the prompt; step s >= 1 = the token
sampled at step s-1). Every selection is a function of the absolute position of a token, so the same tokens are
edited with and without a KV cache:

    None / "all"  every token (prompt and generated)
    "prompt"      the prompt's tokens only (the prefill)
    "generated"   generated tokens only (decode steps)
    "newest"      the newest token of every step: the prompt's last token, then each generated token
    "content"     tokens that are not special tokens (BOS, EOS, pad ...)
    int/list/slice  index the prompt, exactly as in lab.run (-1 = the prompt's last token)
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
import operator
from dataclasses import dataclass, field, fields, replace
from typing import Any

import torch

from .errors import (
    InterplabError,
    LoadError,
    NumberError,
    OutOfRangeError,
    UnknownSiteError,
    UnsupportedSiteError,
    VectorError,
)
from .sae import SAE
from .sites import NEURONS, SITE_NAMES, refuse_tuple_layer

OPS = ("patch", "zero", "mean", "scale", "steer", "project", "clamp", "set", "ban_expert", "stop_grad")
POS_SELECTORS = ("all", "prompt", "generated", "newest", "content")
FEATURE_OPS = ("patch", "zero", "scale", "steer", "set")  # what an edit on an SAE's features can do


@dataclass(frozen=True)
class SourceRef:
    """A run named by what produced it (prompts + edits), so a patch can be serialised and re-run."""

    prompts: tuple[str, ...]
    edits: tuple = ()


@dataclass
class Edit:
    op: str
    site: str
    layer: Any = None
    pos: Any = None
    head: Any = None
    batch: Any = None
    factor: float | None = None
    alpha: float = 1.0
    coeff: float = 0.0
    lo: float | None = None
    hi: float | None = None
    vector: torch.Tensor | None = None
    source: Any = None  # Run or SourceRef (patch)
    reference: Any = None  # Run, list of Runs, or SourceRef (mean)
    label: str | None = None
    enabled: bool = True
    meta: dict = field(default_factory=dict)
    steps: Any = None  # decoding steps whose tokens are edited (None = all; 0 = prefill); int, list, range, slice
    sae: Any = None  # an interplab.sae.SAE: the edit acts on its features at its site (site and layer are its own)
    feature: Any = None  # with sae: the features edited (int, list, slice; None = all)
    neuron: Any = None  # on mlp_pre / mlp_post: the MLP's hidden units edited (int, list, slice; None = all)

    def __post_init__(self):
        # Everything a value alone can get wrong fails here, at construction (and in from_dict / with_), before
        # any model is touched.
        if self.op not in OPS:
            raise InterplabError(f"unknown edit op {self.op!r}: allowed {', '.join(OPS)}.")
        if not isinstance(self.site, str) or not self.site:
            raise UnknownSiteError(
                f"site must be a name such as 'resid_pre' or a module path such as 'transformer.h.0.mlp.output', "
                f"got {type(self.site).__name__} {self.site!r}.")
        if isinstance(self.pos, str) and self.pos not in POS_SELECTORS:
            raise InterplabError(
                f"unknown position selector {self.pos!r}: allowed {', '.join(POS_SELECTORS)}, an int, a list, a "
                f"slice or None (= all).")
        refuse_tuple_layer(self.layer)
        for name in ("layer", "head", "batch", "neuron") + (() if isinstance(self.pos, str) else ("pos",)):
            setattr(self, name, _selection(getattr(self, name), name))
        if self.neuron is not None:
            self._check_neurons()
        if self.steps is not None:
            _check_steps(self.steps)
        if self.op == "scale":
            self.factor = _number(self.factor, "scale factor", "Use a finite factor (0 zeroes the site, 1 leaves "
                                                               "it unchanged).")
        self.alpha = _number(self.alpha, f"{self.op} alpha", "Use a finite alpha; size it against "
                                                             "lab.residual_norm(site, layer).")
        self.coeff = _number(self.coeff, f"{self.op} coeff", "Use a finite coeff (0 removes the direction, 1 keeps "
                                                             "it).")
        for name, side in (("lo", "lower"), ("hi", "upper")):
            if getattr(self, name) is not None:
                setattr(self, name, _number(getattr(self, name), f"{self.op} {name}",
                                            f"Use a finite bound, or None for no {side} bound."))
        if self.lo is not None and self.hi is not None and self.lo > self.hi:
            raise NumberError(
                f"{self.op} lo={self.lo:g} > hi={self.hi:g}: the range is empty. lo is the lower and hi the upper "
                f"bound of the coefficient along the direction; swap them.")
        if self.sae is not None or self.feature is not None:
            self._check_features()
        elif self.vector is not None:
            self.vector = as_tensor(self.vector, what=f"{self.op} vector")
            if self.neuron is not None and self.vector.dim() == 0:  # one number for every selected neuron
                self.vector = self.vector.reshape(1)
            _check_vector(self.op, self.vector)
        if self.op == "ban_expert":
            experts = self.meta.get("experts")
            if not isinstance(experts, list) or not experts or any(
                    isinstance(x, bool) or not isinstance(x, int) or x < 0 for x in experts):
                raise OutOfRangeError(
                    f"ban_expert expert={experts!r}: experts are router indices, ints >= 0 (or a non-empty list).")

    def _check_neurons(self) -> None:
        if self.site in SITE_NAMES and self.site not in NEURONS or self.sae is not None or self.feature is not None:
            op = self.op if self.op != "mean" else "mean_ablate"
            raise UnsupportedSiteError(
                f"neuron={_sel_str(self.neuron)} on {self.site!r}: neurons are the MLP's hidden units, sites "
                f"{' and '.join(map(repr, sorted(NEURONS)))} (e.g. ilab.{op}('mlp_post', layer, neuron=...)).")
        if self.head is not None:
            raise UnsupportedSiteError(f"head={self.head!r} with neuron=: the MLP has no heads; drop head=.")
        if self.op == "ban_expert":
            raise UnsupportedSiteError("ban_expert re-routes tokens; it selects no neurons: drop neuron=.")

    def _check_features(self) -> None:
        sae = self.sae
        if not isinstance(sae, SAE):
            raise InterplabError(f"feature={self.feature!r} needs an SAE in place of the site: ilab.{self.op}(sae, "
                                 f"feature=...) with sae = ilab.SAE.load(...); got site {self.site!r}.")
        if self.op not in FEATURE_OPS:
            raise UnsupportedSiteError(
                f"{self.op} on an SAE's features: an SAE edit is one of {', '.join(FEATURE_OPS)} (ilab.zero, scale, "
                f"set_value, steer, patch). For {self.op}, edit the site itself: ilab.{self.op}({sae.site!r}, "
                f"{sae.layer}, ...).")
        if self.head is not None:
            raise UnsupportedSiteError(f"head={self.head!r}: an SAE's features span the whole site {sae.site!r}; "
                                       f"drop head=.")
        self.site, self.layer = sae.site, sae.layer
        self.feature = _selection(self.feature, "feature")
        feats = sae.features_of(self.feature)  # out of range: a typed error now, before any model is touched
        if self.op == "steer" and self.feature is None:
            raise InterplabError(f"steer on an SAE needs feature=: the feature(s) whose decoder direction is added "
                                 f"(0..{sae.d_sae - 1}).")
        if self.op == "set":
            if self.vector is None:
                raise InterplabError("set_value on an SAE needs value=: the activation to give the features.")
            self.vector = as_tensor(self.vector, what="set_value value")
            if self.vector.dim() > 1 or self.vector.numel() not in (1, len(feats)):
                raise VectorError(f"set_value on {len(feats)} SAE feature(s): value must be a number or one per "
                                  f"feature ({len(feats)}), got shape {list(self.vector.shape)}.")
        elif self.vector is not None:  # a patch source given as the site's activations
            self.vector = as_tensor(self.vector, what=f"{self.op} source")

    def __iter__(self):
        # One edit where a list is expected (edits=ilab.zero(...)) would fail deep inside with "not iterable".
        raise InterplabError(
            f"got one edit ({self.describe()}) where a list of edits is expected: wrap it in a list, "
            f"edits=[ilab.{self.op if self.op != 'mean' else 'mean_ablate'}(...)].")

    # ---- description ---------------------------------------------------------------------------------
    def describe(self) -> str:
        """A short human label: 'patch resid_pre L3 pos 5', used in logs and widget lists."""
        if self.label:
            return self.label
        parts = [self.op, self.site]
        if self.layer is not None:
            parts.append(f"L{_sel_str(self.layer)}")
        if self.head is not None:
            parts.append(f"H{_sel_str(self.head)}")
        if self.neuron is not None:
            parts.append(f"N{_sel_str(self.neuron)}")
        if self.feature is not None or self.sae is not None:
            parts.append(f"F{'all' if self.feature is None else _sel_str(self.feature)}")
        if self.pos is not None:
            parts.append(f"pos {_sel_str(self.pos)}")
        if self.op == "scale":
            parts.append(f"x{self.factor:g}")
        if self.op == "steer":
            parts.append(f"alpha {self.alpha:g}")
        if self.op == "project":
            parts.append(f"coeff {self.coeff:g}")
        if self.op == "ban_expert":
            parts.append(f"expert {_sel_str(self.meta.get('experts'))}")
        if self.steps is not None:
            parts.append(f"steps {_sel_str(self.steps)}")
        return " ".join(parts)

    def with_(self, **changes) -> Edit:
        return replace(self, **changes)

    # ---- JSON ---------------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if v is None or (f.name == "enabled" and v) or (f.name == "meta" and not v):
                continue
            if f.name in ("alpha",) and v == 1.0 and self.op != "steer":
                continue
            if f.name in ("coeff",) and v == 0.0 and self.op != "project":
                continue
            out[f.name] = _encode(v)
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, d: dict) -> Edit:
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise InterplabError(f"unknown edit fields {sorted(unknown)}: allowed {sorted(known)}.")
        return cls(**{k: _decode(v) for k, v in d.items()})

    @classmethod
    def from_json(cls, s: str) -> Edit:
        return cls.from_dict(json.loads(s))


def edits_to_json(edits: list[Edit]) -> str:
    for e in edits:
        if not isinstance(e, Edit):  # lab.run builds its memo key here, before it plans (and checks) the edits
            raise InterplabError(
                f"edits must be ilab edits (ilab.patch, ilab.zero, ilab.steer ...), got {type(e).__name__} {e!r}.")
    return json.dumps([e.to_dict() for e in edits])


def edits_key(edits: list[Edit]) -> str:
    """What identifies a list of edits, for a memo: their JSON with each tensor replaced by a digest of its bytes
    (a patch from a [rows, pos, width] tensor would otherwise be written out number by number)."""
    for e in edits:
        if not isinstance(e, Edit):  # lab.run builds its memo key here, before it plans (and checks) the edits
            raise InterplabError(
                f"edits must be ilab edits (ilab.patch, ilab.zero, ilab.steer ...), got {type(e).__name__} {e!r}.")
    return json.dumps([_key_of_edit(e) for e in edits], default=str)


def _key_of_edit(e: Edit) -> dict:
    def key(v):
        if isinstance(v, torch.Tensor):
            data = v.detach().cpu().contiguous().reshape(-1)
            digest = hashlib.blake2b(data.view(torch.uint8).numpy().tobytes(), digest_size=16).hexdigest()
            return {"__digest__": digest, "shape": list(v.shape), "dtype": str(v.dtype)}
        if isinstance(v, SAE):
            return {"__sae__": v.digest}
        if hasattr(v, "source_ref"):  # a Run: what produced it, its own tensor edits digested too
            return {"__run__": list(v.prompts), "edits": [_key_of_edit(x) for x in v.edits]}
        if isinstance(v, (list, tuple)) and v and hasattr(v[0], "source_ref"):
            return [key(x) for x in v]
        return _encode(v)
    return {f.name: key(getattr(e, f.name)) for f in fields(e)}


def edits_from_json(s: str) -> list[Edit]:
    """Edits from edits_to_json's text (a JSON list of edit dicts)."""
    try:
        data = json.loads(s)
    except (TypeError, json.JSONDecodeError) as e:
        raise InterplabError(f"edits_from_json needs the JSON text edits_to_json wrote (a list of edits); "
                             f"{repr(s)[:60]} is not JSON: {e}") from None
    if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
        raise InterplabError(f"edits_from_json needs a JSON list of edit objects (as edits_to_json writes), got "
                             f"{type(data).__name__} {repr(data)[:60]}")
    return [Edit.from_dict(d) for d in data]


# ---- constructors (the public vocabulary) -----------------------------------------------------------------

def _on(site, layer, kw: dict, op: str):
    """(site, layer, kw) of a constructor: an SAE in place of the site brings its own site and layer."""
    refuse_tuple_layer(layer)  # before anything else is checked: patch("z", (0, 2), head=1) names the slip first
    if not isinstance(site, SAE):
        return site, layer, kw
    if layer is not None:
        raise InterplabError(f"{op} on an SAE: the SAE fixes the site and layer ({site.describe()}); drop layer="
                             f"{layer!r} and say which features with feature=.")
    return site.site, site.layer, {**kw, "sae": site}


def patch(site, layer=None, pos=None, head=None, source=None, batch=None, **kw) -> Edit:
    """Copy the activation of `source` (a Run, or a tensor shaped like the site) into this run. On an SAE
    (patch(sae, feature=i, source=run)): the selected features take their values in the source run."""
    site, layer, kw = _on(site, layer, kw, "patch")
    if source is None:
        raise InterplabError("patch needs source=: a Run (e.g. lab.run(clean)) or a tensor shaped like the site.")
    if not (isinstance(source, (torch.Tensor, str, SourceRef)) or hasattr(source, "source_ref") or (
            isinstance(source, list) and source and all(isinstance(p, str) for p in source))):
        raise InterplabError(
            f"patch source must be a Run (lab.run(clean)), a prompt (or list of prompts) or a tensor shaped like the "
            f"site; got {type(source).__name__}.")
    if isinstance(source, torch.Tensor):
        return Edit("patch", site, layer, pos, head, batch, vector=source, **kw)
    return Edit("patch", site, layer, pos, head, batch, source=source, **kw)


def stop_grad(site, layer=None, pos=None, head=None, batch=None, **kw) -> Edit:
    """The value unchanged, no gradient back through it (what it selects stops taking part in a backward)."""
    site, layer, kw = _on(site, layer, kw, "stop_grad")
    return Edit("stop_grad", site, layer, pos, head, batch, **kw)


def zero(site, layer=None, pos=None, head=None, batch=None, **kw) -> Edit:
    """Set the site (or, on an SAE, the selected features: zero(sae, feature=i)) to 0."""
    site, layer, kw = _on(site, layer, kw, "zero")
    return Edit("zero", site, layer, pos, head, batch, **kw)


def mean_ablate(site, layer=None, pos=None, head=None, reference=None, batch=None, **kw) -> Edit:
    """Replace with the mean activation over the rows (and, if lengths differ, tokens) of reference runs."""
    site, layer, kw = _on(site, layer, kw, "mean_ablate")
    if reference is None:
        raise InterplabError("mean_ablate needs reference=: a Run or list of Runs over a reference dataset.")
    refs = reference if isinstance(reference, (list, tuple)) else [reference]
    if not refs or not all(isinstance(r, SourceRef) or hasattr(r, "source_ref") for r in refs):
        # prompt strings are not taken: the mean needs each reference's token lengths, which a Run carries
        what = "an empty list" if not refs else type(next(r for r in refs if not (
            isinstance(r, SourceRef) or hasattr(r, "source_ref")))).__name__
        raise InterplabError(
            f"mean_ablate reference= must be a Run or a non-empty list of Runs, got {what}: run the reference "
            f"prompts first, reference=lab.run(['prompt 1', 'prompt 2', ...]).")
    return Edit("mean", site, layer, pos, head, batch, reference=reference, **kw)


def scale(site, layer=None, factor=1.0, pos=None, head=None, batch=None, **kw) -> Edit:
    """h * factor; on an SAE, scale(sae, factor, feature=i) multiplies the selected features' activations."""
    if isinstance(site, SAE) and layer is not None:  # scale(sae, 2.0, feature=i): the factor comes second
        if factor != 1.0:
            raise InterplabError(f"scale on an SAE takes the factor once: scale(sae, {factor!r}, feature=...); got "
                                 f"{layer!r} as well.")
        factor, layer = layer, None
    site, layer, kw = _on(site, layer, kw, "scale")
    return Edit("scale", site, layer, pos, head, batch, factor=factor, **kw)


def steer(site, layer=None, vector=None, alpha=1.0, pos=None, head=None, batch=None, **kw) -> Edit:
    """h + alpha * vector; on an SAE, steer(sae, feature=i, alpha=a) adds a times feature i's decoder direction."""
    if isinstance(site, SAE):
        if vector is not None:
            raise VectorError("steer on an SAE adds its features' decoder directions: give feature= and alpha=, not "
                              "vector=.")
        site, layer, kw = _on(site, layer, kw, "steer")
        return Edit("steer", site, layer, pos, head, batch, alpha=alpha, **kw)
    if vector is None:
        raise VectorError("steer needs vector=: a tensor of the site's width (d_model for the residual stream).")
    return Edit("steer", site, layer, pos, head, batch, alpha=alpha, vector=vector, **kw)


def project(site, layer=None, direction=None, coeff=0.0, pos=None, head=None, batch=None, **kw) -> Edit:
    site, layer, kw = _on(site, layer, kw, "project")
    if direction is None:
        raise VectorError("project needs direction=: a tensor of the site's width.")
    return Edit("project", site, layer, pos, head, batch, coeff=coeff, vector=direction, **kw)


def clamp(site, layer=None, direction=None, lo=None, hi=None, pos=None, head=None, batch=None, **kw) -> Edit:
    site, layer, kw = _on(site, layer, kw, "clamp")
    if direction is None:
        raise VectorError("clamp needs direction=: a tensor of the site's width.")
    if lo is None and hi is None:
        raise InterplabError("clamp needs lo= and/or hi=: the range for the coefficient along the direction.")
    return Edit("clamp", site, layer, pos, head, batch, lo=lo, hi=hi, vector=direction, **kw)


def set_value(site, layer=None, value=None, pos=None, head=None, batch=None, **kw) -> Edit:
    """Set the site to value; on an SAE, set_value(sae, value, feature=i) sets the selected features' activations."""
    if isinstance(site, SAE) and layer is not None:  # set_value(sae, 5.0, feature=i): the value comes second
        if value is not None:
            raise InterplabError("set_value on an SAE takes the value once: set_value(sae, value, feature=...).")
        value, layer = layer, None
    site, layer, kw = _on(site, layer, kw, "set_value")
    if value is None:
        raise InterplabError("set needs value=: a tensor broadcastable to the selected activation.")
    return Edit("set", site, layer, pos, head, batch, vector=value, **kw)


# ---- application ----------------------------------------------------------------------------------------

@dataclass
class ApplyContext:
    """What an edit needs to know about the tensor it edits."""

    lengths: list[int]  # real tokens per row (the rest is padding)
    n_heads: int | None = None
    offset: int = 0  # absolute position of column 0 (non-zero on decode steps)
    source: torch.Tensor | None = None  # resolved patch / mean value for this site and layer
    # Generation (all optional; None keeps the plain-run behaviour above):
    positions: torch.Tensor | None = None  # [batch, pos] absolute position of each column in its row (-1 = pad)
    prompt_lengths: list[int] | None = None  # set while generating: ints/slices index the prompt, words apply
    special: torch.Tensor | None = None  # [batch, pos] True where the token is a special token (for "content")
    step: int | None = None  # the decoding step being computed (0 = prefill); informational
    # [batch, n] the absolute positions 0..n-1 the edit selects in each row (its batch rows, pos and steps), built
    # once per generation (position_table): a decoding step reads its columns from it instead of building them
    table: torch.Tensor | None = None
    # the edit applies at every row and position of every forward (a generation that found so once): no mask at all
    everywhere: bool = False


def apply_edit(edit: Edit, h: torch.Tensor, ctx: ApplyContext) -> torch.Tensor:
    """Return h with `edit` applied where its selection holds. h is [batch, pos, width]; never modified in place."""
    if edit.op == "ban_expert":
        raise UnsupportedSiteError(
            "ban_expert re-routes tokens, which a tensor edit cannot do: use it with lab.generate(...), "
            "`with lab.edit([...]): lab.run(...)` or lab.bind([...]).")
    if edit.sae is not None:
        return _apply_features(edit, h, ctx)
    if edit.neuron is not None:
        return _apply_neurons(edit, h, ctx)
    if ctx.everywhere and edit.op in FRESH_OPS and edit.head is None:
        return _transform(edit, h, ctx)
    b, t = h.shape[0], h.shape[1]
    heads = edit.head is not None
    if heads:
        if ctx.n_heads is None:
            raise UnsupportedSiteError(
                f"head={edit.head!r} given for site {edit.site!r}, which has no heads: heads exist on z, q, k, v, "
                f"rot_q, rot_k and pattern."
            )
        x = h.view(b, t, ctx.n_heads, h.shape[-1] // ctx.n_heads)
    else:
        x = h
    valid = None
    src = ctx.source if ctx.source is not None else edit.vector
    if edit.op in ("patch", "mean") and ctx.positions is not None and src is not None and src.dim() == h.dim():
        src, valid = _gather_source(src, ctx.positions, b)  # generation: take the source at each absolute position
        ctx = replace(ctx, source=src)
    new = _transform(edit, x, ctx)
    mask = selection_mask(edit, b, t, ctx)  # [b, t], on the host
    if valid is not None:
        mask &= valid
    if not heads and edit.op in FRESH_OPS and bool(mask.all()):  # every row and position: nothing to select
        return new
    if not heads and edit.op == "stop_grad" and bool(mask.all()):  # no path back at all (a torch.where would keep
        return new.clone()  # one of zeros, which a backward still walks: an attribution graph's every pattern)
    mask = mask.to(h.device)
    if heads:
        hm = torch.zeros(ctx.n_heads, dtype=torch.bool, device=h.device)
        hm[_indices(edit.head, ctx.n_heads, "head")] = True
        mask = mask[:, :, None] & hm  # [b, t, H]
    out = torch.where(mask[..., None], new, x)
    return out.reshape(h.shape)


def _apply_neurons(edit: Edit, h: torch.Tensor, ctx: ApplyContext) -> torch.Tensor:
    """An edit of some of the MLP's neurons: the same edit on those units alone (their slice of h, of the source and
    of a vector), written back into h (out of place, so gradients flow through the rest)."""
    width = h.shape[-1]
    idx = torch.tensor(_indices(edit.neuron, width, "neuron"), device=h.device)

    def units(v):  # a value over the site's width -> the selected units' values; anything else as it is
        return v.index_select(-1, idx.to(v.device)) if v is not None and v.dim() and v.shape[-1] == width else v

    vector = units(edit.vector)
    if vector is not None and edit.op in ("steer", "set", "project", "clamp") and vector.shape[-1] == 1 < len(idx):
        vector = vector.expand(*vector.shape[:-1], len(idx))
    one = replace(edit, neuron=None, vector=vector)
    part = apply_edit(one, h.index_select(-1, idx), replace(ctx, source=units(ctx.source)))
    return h.index_copy(-1, idx, part.to(h.dtype))


# ops whose transform returns a tensor of its own (not a view of the input or of a source): where the edit selects
# every row and position it is the output as it is, bit for bit what torch.where would copy
FRESH_OPS = ("zero", "scale", "steer", "set", "project", "clamp")


def _apply_features(edit: Edit, h: torch.Tensor, ctx: ApplyContext) -> torch.Tensor:
    """An edit of an SAE's features: h + decode(f') - decode(f) where selected (the change of the selected features
    times their decoder directions, times the SAE's run-time output scale), h itself elsewhere."""
    sae, b, t = edit.sae, h.shape[0], h.shape[1]
    if h.shape[-1] != sae.d_in:
        raise OutOfRangeError(f"{sae.describe()} has d_in={sae.d_in} but {edit.site!r} is {h.shape[-1]} wide here: "
                              f"the SAE belongs to another model.")
    src, valid = ctx.source if ctx.source is not None else edit.vector, None
    if edit.op == "patch" and ctx.positions is not None and src is not None and src.dim() == h.dim():
        src, valid = _gather_source(src, ctx.positions, b)
    mask = selection_mask(edit, b, t, ctx).to(h.device)
    if valid is not None:
        mask &= valid.to(h.device)
    if not bool(mask.any()):
        return h
    feats = sae.features_of(edit.feature)
    x = h.to(sae.W_enc.dtype)
    if edit.op == "steer":
        df = torch.full((b, t, len(feats)), edit.alpha, dtype=x.dtype, device=x.device)
    else:
        f = sae.encode(x)[..., feats]
        if edit.op == "zero":
            new = torch.zeros_like(f)
        elif edit.op == "scale":
            new = f * edit.factor
        elif edit.op == "set":
            new = torch.zeros_like(f) + edit.vector.to(device=f.device, dtype=f.dtype)
        else:  # patch: the features of the source run's activation at this site
            if src is None:
                raise InterplabError(f"patch of {sae.describe()} has no source value: it was not resolved by the Lab.")
            new = sae.encode(_broadcast_source(src.to(device=x.device, dtype=x.dtype), x, edit))[..., feats]
        df = new - f
    delta = (df @ sae.direction(feats).to(device=x.device, dtype=x.dtype)) * sae.out_scale(x)
    return torch.where(mask[..., None], h + delta.to(h.dtype), h)


def position_table(edit: Edit, prompt_lengths: list[int], n: int) -> torch.Tensor:
    """[rows, n]: the absolute positions 0..n-1 that `edit` selects in each row of a generation whose prompts are
    `prompt_lengths` long (its batch rows, pos and steps; pos='content' is left to each step, which knows the
    tokens). Built once per generation: each decoding step then reads its columns' positions (ctx.table)."""
    b = len(prompt_lengths)
    rows = torch.zeros(b, dtype=torch.bool)
    rows[_indices(edit.batch, b, "batch row")] = True
    table = torch.zeros(b, n, dtype=torch.bool)
    for r in range(b):
        if not rows[r]:
            continue
        table[r, _select(edit.pos, n, prompt_lengths[r])] = True
        if edit.steps is not None:
            table[r] &= _steps_mask(edit.steps, (torch.arange(n) - prompt_lengths[r] + 1).clamp(min=0))
    return table


def selection_mask(edit: Edit, b: int, t: int, ctx: ApplyContext) -> torch.Tensor:
    """[b, t] on the host: where `edit` applies in a [b, t, ...] tensor of this forward."""
    table, positions = ctx.table, ctx.positions
    if table is not None and positions is not None and tuple(positions.shape) == (b, t) and table.shape[0] == b \
            and int(positions.max()) < table.shape[1]:
        cols = table.gather(1, positions.clamp(min=0)) & (positions >= 0)  # (-1: padding, never edited)
        return _content_only(edit, cols, ctx)
    rows = torch.zeros(b, dtype=torch.bool)
    rows[_indices(edit.batch, b, "batch row")] = True
    simple = ctx.positions is None and ctx.prompt_lengths is None and edit.steps is None and not isinstance(
        edit.pos, str)
    if simple:  # a plain run: columns are positions offset..offset+t-1, right padding
        cols = torch.zeros(b, t, dtype=torch.bool)
        for r in range(b):
            if not rows[r]:
                continue
            n = ctx.lengths[r] if r < len(ctx.lengths) else t + ctx.offset
            for p in _indices(edit.pos, n, "position"):
                c = p - ctx.offset
                if 0 <= c < t:
                    cols[r, c] = True
        return cols
    positions = ctx.positions
    if positions is None:
        positions = torch.full((b, t), -1, dtype=torch.long)
        for r in range(b):
            n = ctx.lengths[r] if r < len(ctx.lengths) else t + ctx.offset
            k = max(0, min(t, n - ctx.offset))
            positions[r, :k] = torch.arange(ctx.offset, ctx.offset + k)
    positions = positions.detach().cpu().long()
    if tuple(positions.shape) != (b, t):
        raise InterplabError(f"internal: position map {tuple(positions.shape)} does not fit a [{b}, {t}] tensor.")
    cols = torch.zeros(b, t, dtype=torch.bool)
    for r in range(b):
        if not rows[r]:
            continue
        p = positions[r]
        n = ctx.lengths[r] if r < len(ctx.lengths) else int(p.max()) + 1
        n = max(n, int(p.max()) + 1)
        prompt_len = ctx.prompt_lengths[r] if ctx.prompt_lengths is not None else None
        sel = torch.zeros(n, dtype=torch.bool)
        sel[_select(edit.pos, n, prompt_len)] = True
        if edit.steps is not None:
            birth = torch.zeros(n, dtype=torch.long)  # the step at which each position is fed in
            if prompt_len is not None:
                birth = (torch.arange(n) - prompt_len + 1).clamp(min=0)
            sel &= _steps_mask(edit.steps, birth)
        valid = p >= 0
        cols[r, valid] = sel[p[valid]]
    return _content_only(edit, cols, ctx)


def _content_only(edit: Edit, cols: torch.Tensor, ctx: ApplyContext) -> torch.Tensor:
    """cols without the special tokens' positions where pos='content'."""
    if edit.pos == "content":
        if ctx.special is None:
            raise InterplabError(
                "pos='content' needs the token ids to find special tokens: use it with lab.generate or bound edits "
                "(lab.edit / lab.bind), or give explicit positions in lab.run.")
        cols &= ~ctx.special.detach().cpu().bool()
    return cols


def _select(pos, n: int, prompt_len: int | None) -> list[int]:
    """Positions (of 0..n-1) selected by pos; while generating, ints/lists/slices index the prompt."""
    if pos is None or pos in ("all", "content"):
        return list(range(n))
    if isinstance(pos, str):
        if prompt_len is None:  # a plain forward: the whole input is the prompt
            return {"prompt": list(range(n)), "generated": [], "newest": [n - 1] if n else []}[pos]
        return {"prompt": list(range(min(prompt_len, n))), "generated": list(range(prompt_len, n)),
                "newest": list(range(max(prompt_len - 1, 0), n))}[pos]
    return _indices(pos, prompt_len if prompt_len is not None else n, "position")


def _check_steps(steps) -> None:
    if isinstance(steps, slice):
        items = [x for x in (steps.start, steps.stop) if x is not None]
        if steps.step is not None and steps.step <= 0:
            raise OutOfRangeError(f"steps={_sel_str(steps)}: a slice of steps needs a positive step.")
    elif isinstance(steps, (list, tuple, range)):
        items = list(steps)
    else:
        items = [steps]
    for s in items:
        if isinstance(s, bool) or not isinstance(s, int) or s < 0:
            raise OutOfRangeError(
                f"steps={steps!r}: decoding steps are ints >= 0 (0 = the prefill, 1 = the first generated token "
                f"fed back in ...); negative steps are not allowed because the number of steps is open-ended.")


def _steps_mask(steps, birth: torch.Tensor) -> torch.Tensor:
    if isinstance(steps, slice):
        start = steps.start or 0
        stop = steps.stop
        step = steps.step or 1
        m = (birth >= start) & ((birth - start) % step == 0)
        return m if stop is None else m & (birth < stop)
    items = list(steps) if isinstance(steps, (list, tuple, range)) else [steps]
    return torch.isin(birth, torch.tensor(items, dtype=torch.long))


def _transform(edit: Edit, x: torch.Tensor, ctx: ApplyContext) -> torch.Tensor:
    op = edit.op
    if op == "stop_grad":
        return x.detach()
    if op == "zero":
        return torch.zeros_like(x)
    if op == "scale":
        return x * edit.factor
    if op in ("patch", "mean"):
        src = ctx.source if ctx.source is not None else edit.vector
        if src is None:
            raise InterplabError(f"{op} edit on {edit.site!r} has no source value: it was not resolved by the Lab.")
        src = src.to(device=x.device, dtype=x.dtype)
        src = src.view(*src.shape[:-1], *x.shape[2:]) if src.shape[-1] != x.shape[-1] else src
        return _broadcast_source(src, x, edit)
    v = _fit_vector(edit, x)
    if op == "set":
        return torch.zeros_like(x) + v
    if op == "steer":
        return x + edit.alpha * v
    u = v / v.norm(dim=-1, keepdim=True)
    coef = (x * u).sum(-1, keepdim=True)
    if op == "project":
        return x - coef * u + edit.coeff * coef * u
    if op == "clamp":
        return x + (coef.clamp(edit.lo, edit.hi) - coef) * u
    raise AssertionError(op)


def _gather_source(src: torch.Tensor, positions: torch.Tensor, b: int):
    """A per-position source [1 or b, S, ...] read at absolute positions [b, t]; positions >= S are left alone."""
    pos = positions.to(src.device).long()
    n = src.shape[1]
    idx = pos.clamp(0, n - 1)
    if src.shape[0] == 1:
        out = src[0][idx]
    elif src.shape[0] == b:
        out = src[torch.arange(b, device=src.device)[:, None], idx]
    else:
        raise OutOfRangeError(f"the patch source has {src.shape[0]} rows but this run has {b}; use 1 row or {b}.")
    return out, ((pos >= 0) & (pos < n)).cpu()


def _broadcast_source(src: torch.Tensor, x: torch.Tensor, edit: Edit) -> torch.Tensor:
    """Align a cached source activation with x: equal shape, or batch 1 / no batch broadcast over rows."""
    if src.dim() == x.dim() - 2:  # one vector for every row and position (e.g. a mean over every real token)
        return src.expand_as(x)
    if src.dim() == x.dim() - 1:
        src = src.unsqueeze(0)
    if src.shape[1:] != x.shape[1:] and src.dim() == x.dim():
        if src.shape[1] != x.shape[1]:
            raise OutOfRangeError(
                f"{edit.op} on {edit.site!r}: the source has {src.shape[1]} positions but this run has "
                f"{x.shape[1]}. Position-wise patching needs prompts of equal token length."
            )
        raise VectorError(f"{edit.op} source shape {tuple(src.shape)} does not fit the site's {tuple(x.shape)}.")
    if src.shape[0] not in (1, x.shape[0]):
        raise OutOfRangeError(
            f"{edit.op} on {edit.site!r}: the source has {src.shape[0]} rows but this run has {x.shape[0]}; "
            f"use a source of 1 row (broadcast) or of the same batch."
        )
    return src.expand_as(x)


def _fit_vector(edit: Edit, x: torch.Tensor) -> torch.Tensor:
    v = edit.vector
    if v is None:
        raise VectorError(f"{edit.op} on {edit.site!r} needs a vector.")
    width = x.shape[-1]
    if v.shape[-1] != width:
        what = "d_head" if edit.head is not None else "the site's width"
        raise VectorError(
            f"{edit.op} vector has size {v.shape[-1]} but {what} at {edit.site!r} is {width}. "
            f"Build it from this model's activations (e.g. ilab.analyses.vectors.diff_of_means) or reshape it "
            f"to {width}."
        )
    try:
        if v.dim() > 1:  # (a [width] vector fits any [.., width] activation: no check per decoding step)
            torch.broadcast_shapes(v.shape, x.shape)
    except RuntimeError:
        raise VectorError(
            f"{edit.op} vector of shape {tuple(v.shape)} does not fit the activation {tuple(x.shape)} at "
            f"{edit.site!r}: give a [{width}] vector (the same at every position) or one row per position."
        ) from None
    return v.to(device=x.device, dtype=x.dtype)  # device and dtype are cast silently, size never


def as_tensor(v, what: str) -> torch.Tensor:
    if not isinstance(v, torch.Tensor):
        try:
            v = torch.as_tensor(v, dtype=torch.float32)
        except (TypeError, ValueError) as e:
            raise VectorError(f"{what} must be a tensor or a list of numbers: {e}") from None
    if v.is_floating_point() and not torch.isfinite(v).all():
        bad = (~torch.isfinite(v)).sum().item()
        raise VectorError(f"{what} holds {bad} NaN/Inf values: fix the vector (normalising a zero vector gives NaN).")
    return v.detach()


def _check_vector(op: str, v: torch.Tensor) -> None:
    if v.dim() == 0 or v.numel() == 0:
        raise VectorError(
            f"{op} vector has shape {tuple(v.shape)}: give a tensor of the site's width (d_model for the residual "
            f"stream), e.g. torch.full((lab.d_model,), c) for a constant.")
    if op in ("project", "clamp") and (v.float().norm(dim=-1) == 0).any():
        raise VectorError(
            f"{op} direction is a zero vector: there is no direction to {op} along (normalising it divides by zero "
            f"and fills the run with NaN). Give a non-zero direction, e.g. "
            f"ilab.analyses.vectors.diff_of_means(lab, ...).")


def _number(value, what: str, how: str) -> float:
    """A finite float, or a NumberError saying what was given and how to fix it."""
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_complex():
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise NumberError(f"{what} must be a number, got {type(value).__name__} {value!r}. {how}")
    try:
        f = float(value)
    except OverflowError:
        f = math.inf
    if not math.isfinite(f):
        raise NumberError(f"{what}={f!r} is not a finite number: NaN/Inf would fill the activation with NaN. {how}")
    return f


def _selection(sel, name: str):
    """layer / pos / head / batch: None (= all), an int, a non-empty list of ints, or a slice of ints. Numpy and
    0-d tensor integers become ints (so the edit serialises); floats, bools and strings are refused."""
    if sel is None or isinstance(sel, range):
        if isinstance(sel, range) and not sel:
            raise OutOfRangeError(f"{name}={sel!r} selects nothing: {name} takes an int, a list of ints, a slice or "
                                  f"None (= all).")
        return sel
    if isinstance(sel, slice):
        if sel.step == 0:
            raise OutOfRangeError(f"{name}={_sel_str(sel)}: a slice step cannot be 0.")
        return slice(*(None if x is None else _index(x, name, sel) for x in (sel.start, sel.stop, sel.step)))
    if isinstance(sel, (list, tuple)):
        if not sel:
            raise OutOfRangeError(f"{name}={sel!r} selects nothing: {name} takes an int, a list of ints, a slice or "
                                  f"None (= all).")
        items = [_index(x, name, sel) for x in sel]
        return items if isinstance(sel, list) else tuple(items)
    return _index(sel, name, sel)


def _index(x, name: str, sel) -> int:
    try:
        if isinstance(x, bool):
            raise TypeError
        return operator.index(x)  # ints, numpy ints, 0-d integer tensors; not floats (1.5 would be truncated)
    except TypeError:
        raise OutOfRangeError(f"{name}={sel!r}: {name} takes an int, a list of ints, a slice or None (= all); got "
                              f"{type(x).__name__} {x!r}.") from None


def selected_rows(batch, n: int) -> list[int]:
    """The rows (of n) an edit's batch= selects."""
    return _indices(batch, n, "batch row")


def _indices(sel, n: int, what: str) -> list[int]:
    """The indices (of 0..n-1) an int, list, slice or None (= all) selects; negative ones count from the end."""
    if sel is None:
        return list(range(n))
    if isinstance(sel, slice):
        return list(range(n))[sel]
    items = sel if isinstance(sel, (list, tuple, range)) else [sel]
    out = []
    for i in items:
        i = int(i)
        if not -n <= i < n:
            if what == "position":
                raise OutOfRangeError(f"position {i} out of range: this prompt has {n} tokens (0..{n - 1}, or "
                                      f"-{n}..-1).")
            raise OutOfRangeError(f"{what} {i} out of range: allowed 0..{n - 1}.")
        out.append(i % n)
    return out


def _sel_str(sel) -> str:
    if isinstance(sel, slice):
        return f"{'' if sel.start is None else sel.start}:{'' if sel.stop is None else sel.stop}"
    if isinstance(sel, (list, tuple)):
        return ",".join(str(s) for s in sel)
    return str(sel)


_SAES: dict[str, SAE] = {}  # SAEs read back from JSON, by how they were loaded: one copy per session


def _encode(v):
    if isinstance(v, SAE):  # named by what loaded it; one built in memory can be logged but not read back
        return {"__sae__": v.source, "digest": v.digest}
    if isinstance(v, torch.Tensor):
        return {"__tensor__": v.detach().cpu().float().tolist(), "dtype": str(v.dtype).replace("torch.", "")}
    if isinstance(v, slice):
        return {"__slice__": [v.start, v.stop, v.step]}
    if isinstance(v, float) and not math.isfinite(v):
        return {"__float__": str(v)}
    if isinstance(v, SourceRef):
        return {"__source__": list(v.prompts), "edits": list(v.edits)}
    if hasattr(v, "source_ref"):  # a Run: serialised as what produced it
        return _encode(v.source_ref())
    if isinstance(v, (list, tuple)) and v and (hasattr(v[0], "source_ref") or isinstance(v[0], SourceRef)):
        return [_encode(r) for r in v]
    if isinstance(v, range):
        return list(v)
    return v


def _decode(v):
    if isinstance(v, dict):
        if "__tensor__" in v:
            return torch.tensor(v["__tensor__"], dtype=getattr(torch, v.get("dtype", "float32")))
        if "__slice__" in v:
            return slice(*v["__slice__"])
        if "__float__" in v:
            return float(v["__float__"])
        if "__source__" in v:
            return SourceRef(tuple(v["__source__"]), tuple(v.get("edits", ())))
        if "__sae__" in v:
            return _load_sae(v["__sae__"])
    if isinstance(v, list) and v and isinstance(v[0], dict) and "__source__" in v[0]:
        return [_decode(x) for x in v]
    return v


def _load_sae(args) -> SAE:
    if not isinstance(args, dict) or "source" not in args:
        raise LoadError("this edit names an SAE that was built in memory, so it cannot be read back: save it "
                        "(sae.save('folder')) and use ilab.SAE.load('folder') in the edits you log.")
    key = json.dumps(args, sort_keys=True)
    if key not in _SAES:
        _SAES[key] = SAE.load(**args)
    return _SAES[key]
