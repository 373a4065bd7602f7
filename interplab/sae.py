"""Sparse autoencoders (SAEs) as interplab objects: load, encode, decode, and the site they belong to.

    sae = ilab.SAE.load("path/to/folder")          # a SAELens folder: cfg.json + sae_weights.safetensors
    sae = ilab.SAE.load("ioi-tiny-sae")            # the one shipped with the embedded model
    sae = ilab.SAE.load("params.npz", site="resid_post", layer=12)    # a Gemma Scope file
    sae = ilab.SAE.load("org/repo", path="blocks.8.hook_resid_pre")    # a folder inside a hub repository
    sae = ilab.SAE.load("gpt2-small-res-jb", sae_id="blocks.8.hook_resid_pre")   # a SAELens release (interplab.hub)
    sae = ilab.SAE.load("path/to/Llama3_1-8B-Base-L3R-8x")   # a Llama Scope folder (hyperparams.json + checkpoints/)
    f = sae.encode(x)            # [..., d_in] -> [..., d_sae]
    x_hat = sae.decode(f, x)     # [..., d_sae] -> [..., d_in] (x: the input, needed only by run-time normalisations)

An SAE goes wherever a site name goes in the edit constructors (ilab.zero(sae, feature=3), ...; interplab.edits).

The arithmetic is SAELens's (sae_lens.saes, version 6), written out here:
    sae_in  = norm_in(x) - b_dec * apply_b_dec_to_input
    pre     = sae_in @ W_enc + b_enc
    standard: f = relu(pre)      jumprelu: f = relu(pre) * (pre > threshold)
    topk:     f = relu of the k largest pre-activations, 0 elsewhere (the top k are picked before the ReLU)
    gated:    f = relu(sae_in @ (W_enc * exp(r_mag)) + b_mag) * (sae_in @ W_enc + b_gate > 0)
              (b_enc holds b_mag: pre_acts are the magnitude path's, SAELens's hook_sae_acts_pre)
    decode:   norm_out(f @ W_dec + b_dec)
batchtopk and matryoshka_batchtopk are training architectures in SAELens: at inference they are jumprelu SAEs with
one threshold for every feature (the batch top-k's learnt topk_threshold), and SAELens saves them so
(save_inference_model). Their training checkpoints (architecture "batchtopk", a topk_threshold tensor) load the
same way: threshold = topk_threshold for every feature, the decoder norms folded into the encoder first when
rescale_acts_by_decoder_norm (SAELens's process_state_dict_for_saving_inference).
center_input: SAEs trained on TransformerLens's model loaded with center_writing_weights=True (SAELens's
model_from_pretrained_kwargs; gpt2-small-res-jb and two more releases) read a residual stream whose every writer
(embeddings, W_O, W_out and their biases) was centred over d_model: the Hugging Face model's activation less its mean
over d_model. center_input=True subtracts that mean before encoding and adds it back after decoding; a feature's
decoder direction is added unchanged (the next LayerNorm removes any mean, so either stream gives the same logits).
normalize_activations: "none" and "expected_average_only_in" compute nothing at run time (SAELens folds the
latter's factor sqrt(d_in) / mean norm into the weights when it saves; SAE.load(..., norm_scaling_factor=s) folds a
known factor the same way: W_enc * s, W_dec / s, b_dec / s); "constant_norm_rescale" scales x to norm sqrt(d_in) and
decodes back by the same factor; "layer_norm" standardises x and decodes back with its mean and std.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import torch

from .errors import LoadError, OutOfRangeError, UnsupportedSiteError
from .hub import hub_folder, near, release_table, resolve_release

ARCHITECTURES = ("standard", "topk", "jumprelu", "gated")
# SAELens training architectures whose inference SAE is a jumprelu one (threshold = topk_threshold)
BATCHTOPK_ARCHITECTURES = ("batchtopk", "matryoshka_batchtopk")
NORMALIZATIONS = ("none", "expected_average_only_in", "constant_norm_rescale", "layer_norm")
# SAELens (TransformerLens) hook names -> interplab sites; the layer is the number after "blocks."
HOOKS = {
    "hook_resid_pre": "resid_pre",
    "hook_resid_mid": "resid_mid",
    "hook_resid_post": "resid_post",
    "hook_attn_out": "attn_out",
    "hook_mlp_out": "mlp_out",
    "attn.hook_z": "z",
}
SAE_SITES = ("embed", *HOOKS.values())
EMBEDDED_SAES = {"ioi-tiny-sae": Path(__file__).parent / "zoo" / "ioi_tiny_sae"}
CFG_FILE, WEIGHTS_FILE = "cfg.json", "sae_weights.safetensors"
LLAMA_SCOPE_CFG, LLAMA_SCOPE_WEIGHTS = "hyperparams.json", "checkpoints/final.safetensors"
TENSORS = ("W_enc", "b_enc", "W_dec", "b_dec", "threshold", "b_gate", "r_mag")  # None where the architecture has none


class SAE:
    """A sparse autoencoder on one site of a model: weights, architecture and where it reads."""

    def __init__(self, W_enc, b_enc, W_dec, b_dec, *, site: str, layer: int | None, architecture: str = "standard",
                 threshold=None, k: int | None = None, apply_b_dec_to_input: bool = True,
                 normalize_activations: str = "none", rescale_acts_by_decoder_norm: bool = False,
                 hook_name: str | None = None, source: dict | None = None, cfg: dict | None = None,
                 b_gate=None, r_mag=None, center_input: bool = False):
        if architecture not in ARCHITECTURES:
            raise LoadError(f"unknown SAE architecture {architecture!r}: interplab reads {', '.join(ARCHITECTURES)} "
                            f"(SAELens's meaning); convert other SAEs to one of them.")
        if normalize_activations not in NORMALIZATIONS:
            raise LoadError(f"normalize_activations={normalize_activations!r}: SAELens's values are "
                            f"{', '.join(NORMALIZATIONS)}.")
        if site not in SAE_SITES:
            raise UnsupportedSiteError(f"an SAE on site {site!r}: interplab splices SAEs on {', '.join(SAE_SITES)}.")
        self.W_enc, self.b_enc, self.W_dec, self.b_dec = (_tensor(t, n) for t, n in (
            (W_enc, "W_enc"), (b_enc, "b_enc"), (W_dec, "W_dec"), (b_dec, "b_dec")))
        d_in, d_sae = self.W_enc.shape if self.W_enc.dim() == 2 else (None, None)
        expect = {"W_enc": (d_in, d_sae), "b_enc": (d_sae,), "W_dec": (d_sae, d_in), "b_dec": (d_in,)}
        self.threshold = self.b_gate = self.r_mag = None
        if architecture == "gated":
            if b_gate is None or r_mag is None:
                raise LoadError("a gated SAE needs b_gate and r_mag [d_sae] (and b_enc = SAELens's b_mag); "
                                f"{'b_gate' if b_gate is None else 'r_mag'} was not found.")
            self.b_gate, self.r_mag = _tensor(b_gate, "b_gate"), _tensor(r_mag, "r_mag")
            expect.update(b_gate=(d_sae,), r_mag=(d_sae,))
        if architecture == "jumprelu":
            if threshold is None:
                raise LoadError("a jumprelu SAE needs its threshold tensor [d_sae]; none was found.")
            self.threshold = _tensor(threshold, "threshold")
            expect["threshold"] = (d_sae,)
        for name, shape in expect.items():
            have = tuple(getattr(self, name).shape)
            if d_in is None or have != shape:
                raise LoadError(f"SAE tensor {name} has shape {list(have)}, expected {list(shape)} (W_enc is "
                                f"[d_in, d_sae], W_dec [d_sae, d_in], as SAELens saves them; W_enc here is "
                                f"{list(self.W_enc.shape)}).")
        if architecture == "topk" and (isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= d_sae):
            raise LoadError(f"a topk SAE needs k (its cfg's 'k'), an int in 1..d_sae={d_sae}; got {k!r}.")
        self.d_in, self.d_sae = int(d_in), int(d_sae)
        self.site, self.layer = site, layer
        self.architecture, self.k = architecture, k if architecture == "topk" else None
        self.apply_b_dec_to_input = bool(apply_b_dec_to_input)
        self.normalize_activations = normalize_activations
        self.rescale_acts_by_decoder_norm = bool(rescale_acts_by_decoder_norm)
        self.center_input = bool(center_input)
        if self.center_input and site == "z":
            raise LoadError("center_input is for sites the centred weights write (the residual stream, attn_out, "
                            "mlp_out, embed); the heads' z is read before W_O.")
        self.hook_name = hook_name or _hook_name(site, layer)
        self.source = source  # what SAE.load was given (serialised edits name the SAE by it); None: built in memory
        self.cfg = dict(cfg or {})
        self._on: dict = {}  # device/dtype -> the weights there
        self._digest: str | None = None

    def __setattr__(self, name, value):
        super().__setattr__(name, value)
        if name in TENSORS and "_on" in self.__dict__:
            self._on.clear()  # new weights: no stale copy on a device, and a new digest (memo keys)
            self._digest = None

    # ---- loading -------------------------------------------------------------------------------------------
    @classmethod
    def load(cls, source: str | os.PathLike, *, sae_id: str | None = None, path: str | None = None,
             site: str | None = None, layer: int | None = None, revision: str | None = None,
             norm_scaling_factor: float | None = None, center_input: bool | None = None) -> SAE:
        """An SAE from a SAELens folder, a Gemma Scope params.npz, the embedded 'ioi-tiny-sae', a hub repository,
        or a SAELens release.

        source: a folder holding cfg.json and sae_weights.safetensors (SAELens's format); a params.npz file
                (Gemma Scope: give site= and layer=); a Llama Scope folder (hyperparams.json and
                checkpoints/final.safetensors: its own mean input norm folded unless a factor is given);
                'ioi-tiny-sae'; a hub id ('org/repo', with path= the folder
                inside the repository, or 'hf://org/repo/folder'), downloaded once through huggingface_hub and
                then read from its cache; or a SAELens release name with sae_id= (SAE.load('gpt2-small-res-jb',
                sae_id='blocks.8.hook_resid_pre')), resolved through sae-lens's own table when sae-lens is
                installed, else through interplab's copy of the common releases (interplab.hub.release_table).
        site, layer: where the SAE reads (interplab's site names: resid_pre, resid_post, mlp_out, attn_out, z ...);
                taken from cfg.json's hook_name (or the release) when not given.
        norm_scaling_factor: for normalize_activations="expected_average_only_in", the factor SAELens folds into
                the weights (its pretrained directory's norm_scaling_factor, applied by default for a release, as
                SAELens's from_pretrained does); by default nothing is folded for a folder, as in SAELens's
                load_from_disk.
        center_input: whether the SAE reads the centred residual stream of TransformerLens's center_writing_weights
                model (see the module's notes); by default from the folder's model_from_pretrained_kwargs or the
                release's (SAELens's config_overrides)."""
        if not isinstance(source, (str, os.PathLike)) or not str(source):
            raise LoadError(f"SAE.load needs a folder, a params.npz file, 'ioi-tiny-sae', a hub id or a SAELens "
                            f"release; got {type(source).__name__} {source!r}.")
        release_factor, centred = None, False  # a release's norm_scaling_factor, and its centred model
        given = {"source": str(source), **{k: v for k, v in (("sae_id", sae_id), ("path", path), ("site", site),
                                                               ("layer", layer), ("revision", revision),
                                                               ("norm_scaling_factor", norm_scaling_factor),
                                                               ("center_input", center_input))
                                            if v is not None}}
        text = str(source)
        if sae_id is not None:
            if path is not None:
                raise LoadError("give sae_id= (one SAE of a SAELens release) or path= (a folder inside a hub "
                                "repository), not both.")
            where, site, layer, release_factor, centred = _release_folder(text, sae_id, site, layer, revision)
        elif text in EMBEDDED_SAES:
            where = EMBEDDED_SAES[text]
        elif not Path(text).exists() and not text.startswith("hf://") and text in release_table():
            ids = list(release_table()[text].saes)
            raise LoadError(f"{text!r} is a SAELens release: say which of its {len(ids)} SAEs with sae_id=, e.g. "
                            f"SAE.load({text!r}, sae_id={ids[0]!r}) (its sae_ids: {', '.join(ids[:12])}"
                            f"{', ...' if len(ids) > 12 else ''}).")
        elif text.startswith("hf://") or (path is not None and not Path(text).exists()):
            where = hub_folder(text, path, revision)
        elif Path(text).exists():
            where = Path(text).expanduser()
            if where.is_dir() and path is not None:
                where = where / path
            given["source"] = str(where.resolve()) if path is None else str(Path(text).expanduser().resolve())
        elif re.fullmatch(r"[\w.-]+/[\w.-]+", text):
            raise LoadError(f"{text!r} is no folder here; for a hub repository give the folder inside it too: "
                            f"SAE.load({text!r}, path='blocks.8.hook_resid_pre') (or 'hf://{text}/<folder>').")
        else:
            close = near(text, release_table(), n=5)
            hint = f" (near release names: {', '.join(close)})" if close else ""
            raise LoadError(f"no SAE at {text!r}: not a folder or file here, not 'ioi-tiny-sae', not a hub id "
                            f"('org/repo' with path=), not a SAELens release{hint}. A SAELens folder holds "
                            f"{CFG_FILE} and {WEIGHTS_FILE}.")
        if where.is_dir() and not (where / CFG_FILE).exists() and (where / "params.npz").exists():
            where = where / "params.npz"  # a Gemma Scope folder
        own_factor = None  # the factor a Llama Scope folder states (its hyperparams' mean input norm)
        if where.is_file() or where.suffix == ".npz":
            sae = _load_npz(where, site, layer)
        elif where.is_dir() and not (where / CFG_FILE).exists() and (where / LLAMA_SCOPE_CFG).exists():
            sae, own_factor = _load_llama_scope(where, site, layer)
        else:
            sae = _load_saelens(where, site, layer)
        centre = centred if center_input is None else bool(center_input)
        if centre != sae.center_input:
            if centre and sae.site == "z":
                raise LoadError("center_input=True is for sites the centred weights write (the residual stream, "
                                "attn_out, mlp_out, embed); the heads' z is read before W_O.")
            sae.center_input, sae._digest = centre, None
        if norm_scaling_factor is not None:
            sae._fold_norm_scaling(norm_scaling_factor)
        elif sae.normalize_activations == "expected_average_only_in":
            factor = release_factor if release_factor is not None else own_factor
            if factor is not None:
                sae._fold_norm_scaling(factor)  # as SAELens's from_pretrained folds the release's factor
        sae.source = given
        return sae

    def _fold_norm_scaling(self, s) -> None:
        s = float(s)
        if not (s > 0 and s != float("inf")):
            raise LoadError(f"norm_scaling_factor={s!r}: a positive finite number (sqrt(d_in) / mean input norm).")
        if self.normalize_activations != "expected_average_only_in":
            raise LoadError(f"norm_scaling_factor is for SAEs with normalize_activations='expected_average_only_in'; "
                            f"this one has {self.normalize_activations!r}.")
        self.W_enc, self.W_dec, self.b_dec = self.W_enc * s, self.W_dec / s, self.b_dec / s
        self.normalize_activations = "none"
        self._on.clear()

    def save(self, folder: str | os.PathLike) -> Path:
        """Write the SAE as a SAELens folder (cfg.json + sae_weights.safetensors) that SAELens's load_from_disk
        reads; returns the folder."""
        from safetensors.torch import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        tensors = {"W_enc": self.W_enc, "b_enc": self.b_enc, "W_dec": self.W_dec, "b_dec": self.b_dec}
        if self.threshold is not None:
            tensors["threshold"] = self.threshold
        if self.architecture == "gated":  # SAELens's names: no b_enc, the magnitude path's bias is b_mag
            tensors.update(b_mag=tensors.pop("b_enc"), b_gate=self.b_gate, r_mag=self.r_mag)
        save_file({k: v.detach().contiguous().float() for k, v in tensors.items()}, folder / WEIGHTS_FILE)
        cfg = {"architecture": self.architecture, "d_in": self.d_in, "d_sae": self.d_sae, "dtype": "float32",
               "device": "cpu", "apply_b_dec_to_input": self.apply_b_dec_to_input,
               "normalize_activations": self.normalize_activations,
               "reshape_activations": "hook_z" if self.site == "z" else "none",
               "metadata": {**self.cfg.get("metadata", {}), "hook_name": self.hook_name,
                            "sae_lens_version": "6.0.0"}}
        kwargs = {k: v for k, v in (cfg["metadata"].get("model_from_pretrained_kwargs") or {}).items()
                  if k != "center_writing_weights"}
        if self.center_input:
            kwargs["center_writing_weights"] = True
        cfg["metadata"]["model_from_pretrained_kwargs"] = kwargs
        if self.architecture == "topk":
            cfg.update(k=self.k, rescale_acts_by_decoder_norm=self.rescale_acts_by_decoder_norm)
        (folder / CFG_FILE).write_text(json.dumps(cfg, indent=2) + "\n")
        return folder

    # ---- the arithmetic --------------------------------------------------------------------------------------
    def _weights(self, like: torch.Tensor) -> dict[str, torch.Tensor]:
        key = (like.device, self.W_enc.dtype)
        if key not in self._on:
            self._on[key] = {n: getattr(self, n).to(like.device) for n in TENSORS if getattr(self, n) is not None}
            if self.architecture == "gated":  # the magnitude path's encoder shares W_enc, scaled per feature
                self._on[key]["W_mag"] = self._on[key]["W_enc"] * self._on[key]["r_mag"].exp()
            if self.rescale_acts_by_decoder_norm:
                self._on[key]["dec_norm"] = self._on[key]["W_dec"].norm(dim=-1)
        return self._on[key]

    def _check_input(self, x, what: str) -> torch.Tensor:
        if not isinstance(x, torch.Tensor):
            x = torch.as_tensor(x, dtype=self.W_enc.dtype)
        if x.shape[-1:] != (self.d_in if what == "x" else self.d_sae,):
            width = self.d_in if what == "x" else self.d_sae
            raise OutOfRangeError(f"{'encode' if what == 'x' else 'decode'} takes [..., {width}] "
                                  f"({'d_in' if what == 'x' else 'd_sae'}); got shape {list(x.shape)}.")
        return x.to(self.W_enc.dtype)

    def _norm_in(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple]:
        """x as the encoder sees it, and what decoding needs to undo it: (scale, shift) with out = scale * y + shift."""
        centre = 0.0
        if self.center_input:  # the stream of the centred-weights model the SAE was trained on
            centre = x.mean(dim=-1, keepdim=True)
            x = x - centre
        if self.normalize_activations == "constant_norm_rescale":
            coeff = self.d_in ** 0.5 / x.norm(dim=-1, keepdim=True)
            return x * coeff, (1 / coeff, centre)
        if self.normalize_activations == "layer_norm":
            mu = x.mean(dim=-1, keepdim=True)
            std = (x - mu).std(dim=-1, keepdim=True)
            return (x - mu) / (std + 1e-5), (std, mu + centre)
        return x, (1.0, centre)

    def _sae_in(self, x) -> torch.Tensor:
        """What the encoder multiplies: x normalised, less b_dec where the SAE applies it to its input."""
        x = self._check_input(x, "x")
        sae_in, _ = self._norm_in(x)
        return sae_in - self._weights(x)["b_dec"] if self.apply_b_dec_to_input else sae_in

    def pre_acts(self, x) -> torch.Tensor:
        """[..., d_in] -> [..., d_sae]: the encoder's pre-activations (before ReLU / threshold / top-k; for a gated
        SAE, the magnitude path's)."""
        sae_in = self._sae_in(x)
        w = self._weights(sae_in)
        return sae_in @ w["W_mag" if self.architecture == "gated" else "W_enc"] + w["b_enc"]

    def encode(self, x) -> torch.Tensor:
        """[..., d_in] -> [..., d_sae]: the feature activations (float32, on x's device)."""
        if self.architecture == "gated":
            sae_in = self._sae_in(x)
            w = self._weights(sae_in)
            gate = (sae_in @ w["W_enc"] + w["b_gate"]) > 0
            return (sae_in @ w["W_mag"] + w["b_enc"]).relu() * gate.to(sae_in.dtype)
        pre = self.pre_acts(x)
        if self.architecture == "standard":
            return pre.relu()
        if self.architecture == "jumprelu":
            return pre.relu() * (pre > self._weights(pre)["threshold"]).to(pre.dtype)
        if self.rescale_acts_by_decoder_norm:
            pre = pre * self._weights(pre)["dec_norm"]
        values, idx = pre.topk(self.k, dim=-1, sorted=False)
        return torch.zeros_like(pre).scatter(-1, idx, values.relu())

    def out_scale(self, x=None):
        """The factor decode multiplies f @ W_dec by (a tensor [..., 1] under a run-time normalisation, else 1.0):
        a feature's change df moves the reconstruction by out_scale(x) * df * W_dec[feature]."""
        if self.normalize_activations in ("constant_norm_rescale", "layer_norm"):
            if x is None:
                raise OutOfRangeError(f"this SAE normalises its input at run time ({self.normalize_activations}): "
                                      f"decode needs the input too, decode(f, x).")
            return self._norm_in(self._check_input(x, "x"))[1][0]
        return 1.0

    def decode(self, f, x=None) -> torch.Tensor:
        """[..., d_sae] -> [..., d_in]: the reconstruction. x (the encoded input) is needed only when the SAE
        normalises or centres at run time (constant_norm_rescale, layer_norm, center_input), to undo it."""
        f = self._check_input(f, "f")
        w = self._weights(f)
        if self.rescale_acts_by_decoder_norm:
            f = f / w["dec_norm"]
        y = f @ w["W_dec"] + w["b_dec"]
        if self.normalize_activations in ("constant_norm_rescale", "layer_norm") or self.center_input:
            if x is None:
                raise OutOfRangeError(f"this SAE {'centres' if self.center_input else 'normalises'} its input at "
                                      f"run time: decode needs the input too, decode(f, x).")
            scale, shift = self._norm_in(self._check_input(x, "x"))[1]
            return y * scale + shift
        return y

    def direction(self, feature) -> torch.Tensor:
        """[d_in] (or [n, d_in] for a list): the decoder direction(s) a unit of the feature adds at the site (for
        run-time normalised SAEs, before out_scale)."""
        idx = self.features_of(feature)
        w = self.W_dec[idx]
        if self.rescale_acts_by_decoder_norm:
            w = w / self.W_dec[idx].norm(dim=-1, keepdim=True)
        return w[0] if isinstance(feature, int) else w

    def features_of(self, feature) -> list[int]:
        """An int, list, slice or None (= all) as feature indices, each checked against d_sae. Negative ints are
        refused (a slice keeps Python's meaning: slice(-3, None) is the last three)."""
        n = self.d_sae
        if feature is None:
            return list(range(n))
        if isinstance(feature, slice):
            return list(range(n))[feature]
        items = list(feature) if isinstance(feature, (list, tuple, range)) else [feature]
        out = []
        for i in items:
            if isinstance(i, bool) or not isinstance(i, int):
                raise OutOfRangeError(f"feature={feature!r}: features are ints 0..{n - 1} (a list, a slice or None "
                                      f"= all).")
            if i < 0:  # not Python's count from the end: feature=-1 would silently be feature n-1
                fix = f"write feature={n + i} (d_sae {i}) for that one" if i >= -n else "features count from 0"
                raise OutOfRangeError(f"feature {i}: negative feature indices are refused (this SAE's features are "
                                      f"0..{n - 1}); {fix}.")
            if i >= n:
                raise OutOfRangeError(f"feature {i} out of range: this SAE has {n} features (0..{n - 1}).")
            out.append(i)
        return out

    # ---- the model it belongs to ---------------------------------------------------------------------------
    def width_on(self, engine) -> int:
        """The width of this SAE's site on a model (an Engine): what d_in must be."""
        return engine.n_heads * engine.d_head if self.site == "z" else engine.d_model

    def check_fits(self, engine) -> None:
        """Raise a typed error unless this SAE can be spliced into the engine's model: the layer exists and the
        site's width is d_in."""
        if self.layer is not None and not 0 <= self.layer < engine.n_layers:
            raise OutOfRangeError(
                f"this SAE reads {self.hook_name} (layer {self.layer}) but the model has {engine.n_layers} layers "
                f"(0..{engine.n_layers - 1}): it was trained on another model. Load the SAE made for this model.")
        width = self.width_on(engine)
        if width != self.d_in:
            raise OutOfRangeError(
                f"this SAE has d_in={self.d_in} but {self.site} of this model is {width} wide: it was trained on "
                f"another model (its cfg names {self.cfg.get('metadata', {}).get('model_name') or 'no model'}). "
                f"Load the SAE made for this model.")

    @property
    def digest(self) -> str:
        """A hash of the weights and settings: what identifies this SAE in a memo key."""
        if self._digest is None:
            h = hashlib.blake2b(digest_size=16)
            for t in (getattr(self, n) for n in TENSORS):
                if t is not None:
                    h.update(t.detach().cpu().contiguous().float().numpy().tobytes())
            settings = (self.architecture, self.k, self.apply_b_dec_to_input, self.normalize_activations,
                        self.rescale_acts_by_decoder_norm, self.site, self.layer)
            h.update(repr(settings + ((True,) if self.center_input else ())).encode())  # (old digests unchanged)
            self._digest = h.hexdigest()
        return self._digest

    def to(self, device=None, dtype=None) -> SAE:
        """Move (and cast) the weights; returns self."""
        for n in TENSORS:
            t = getattr(self, n)
            if t is not None:
                setattr(self, n, t.to(device=device, dtype=dtype))
        self._on.clear()
        return self

    def describe(self) -> str:
        """A short label: 'SAE resid_pre L2 (512 features)'."""
        where = self.site if self.layer is None else f"{self.site} L{self.layer}"
        return f"SAE {where} ({self.d_sae} features)"

    def __repr__(self) -> str:
        src = (self.source or {}).get("source", "in memory")
        return (f"SAE({self.architecture}, {self.hook_name} -> {self.site}"
                f"{'' if self.layer is None else f' L{self.layer}'}, d_in={self.d_in}, d_sae={self.d_sae}"
                f"{f', k={self.k}' if self.k else ''}{', centred input' if self.center_input else ''}, from {src})")


def site_of_hook(hook_name: str) -> tuple[str, int | None]:
    """A SAELens / TransformerLens hook name as (interplab site, layer): 'blocks.3.hook_resid_pre' ->
    ('resid_pre', 3); 'hook_embed' -> ('embed', None)."""
    if hook_name == "hook_embed":
        return "embed", None
    m = re.fullmatch(r"blocks\.(\d+)\.(.+)", hook_name or "")
    if m and m[2] in HOOKS:
        return HOOKS[m[2]], int(m[1])
    raise UnsupportedSiteError(
        f"hook_name {hook_name!r}: interplab splices SAEs on blocks.L.{{{', '.join(HOOKS)}}} and hook_embed. Give "
        f"site= and layer= to SAE.load if this SAE reads one of interplab's sites under another name.")


def centred_model(model_kwargs) -> bool:
    """Whether SAELens's model_from_pretrained_kwargs load TransformerLens's model with its writing weights centred
    (the SAE then reads a centred stream: center_input)."""
    return bool(isinstance(model_kwargs, dict) and model_kwargs.get("center_writing_weights"))


def _release_folder(release: str, sae_id, site, layer, revision) -> tuple[Path, str | None, int | None,
                                                                          float | None, bool]:
    """The local folder of a SAELens release's SAE (from the hub cache, else downloaded), where it reads when its
    files do not say (Gemma Scope), the release's norm_scaling_factor, and whether its model was centred."""
    found = resolve_release(release, sae_id)
    if found.hook_name == "hook_embed":
        raise LoadError(f"{release} {sae_id} is a Gemma Scope embedding SAE: SAELens rescales its weights by "
                        f"sqrt(d_model) for the scale its hook_embed reads, and interplab's embed site has not been "
                        f"checked against that scale, so interplab does not load it.")
    if found.hook_name and site is None:
        site, layer = site_of_hook(found.hook_name)
    args = (f", site={site!r}" + ("" if layer is None else f", layer={layer}")) if found.hook_name else ""
    if found.norm_scaling_factor is not None:
        args += f", norm_scaling_factor={found.norm_scaling_factor}"
    centred = centred_model(found.release.model_kwargs)
    if centred:
        args += ", center_input=True"
    where = hub_folder(found.release.repo_id, found.folder, revision, load_args=args)
    return where, site, layer, found.norm_scaling_factor, centred


def _hook_name(site: str, layer: int | None) -> str:
    if site == "embed":
        return "hook_embed"
    return f"blocks.{layer}.{next(k for k, v in HOOKS.items() if v == site)}"


def _tensor(t, name: str) -> torch.Tensor:
    if isinstance(t, torch.Tensor):
        t = t.detach()
    else:
        try:
            t = torch.as_tensor(t)
        except (TypeError, ValueError) as e:
            raise LoadError(f"SAE tensor {name}: not an array of numbers ({e}).") from None
    if not t.is_floating_point():
        t = t.float()
    if t.dtype in (torch.float16, torch.bfloat16):
        t = t.float()  # encode and decode in float32: a splice of an unchanged feature must give the model's logits
    if not torch.isfinite(t).all():
        raise LoadError(f"SAE tensor {name} holds NaN or Inf values: the file is damaged.")
    return t


def _where(site, layer, hook_name, origin: str) -> tuple[str, int | None]:
    if site is None:
        if not hook_name:
            raise LoadError(f"{origin} names no hook_name: give site= and layer= to SAE.load (e.g. site='resid_post', "
                            f"layer=12).")
        site_h, layer_h = site_of_hook(hook_name)
        return site_h, layer_h if layer is None else layer
    if site not in SAE_SITES:
        raise UnsupportedSiteError(f"site={site!r}: an SAE can be spliced on {', '.join(SAE_SITES)}.")
    if site != "embed" and (isinstance(layer, bool) or not isinstance(layer, int) or layer < 0):
        raise OutOfRangeError(f"site {site!r} needs layer=, an int >= 0 (the block the SAE reads); got {layer!r}.")
    return site, None if site == "embed" else layer


def _load_saelens(folder: Path, site, layer) -> SAE:
    cfg_path, weights_path = folder / CFG_FILE, folder / WEIGHTS_FILE
    missing = [p.name for p in (cfg_path, weights_path) if not p.is_file()]
    if missing:
        have = sorted(p.name for p in folder.iterdir())[:8] if folder.is_dir() else []
        raise LoadError(f"{folder} is not a SAELens folder: {' and '.join(missing)} missing (it holds "
                        f"{have or 'nothing'}). A SAELens SAE is a folder with {CFG_FILE} and {WEIGHTS_FILE}; "
                        f"a Gemma Scope SAE is a params.npz file.")
    try:
        cfg = json.loads(cfg_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise LoadError(f"{cfg_path} is not JSON: {e}") from None
    if not isinstance(cfg, dict):
        raise LoadError(f"{cfg_path} must hold a JSON object (SAELens's config), not {type(cfg).__name__}.")
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        state = load_file(weights_path)
    except (SafetensorError, OSError) as e:
        raise LoadError(f"{weights_path} cannot be read as safetensors: {e}") from None
    meta = cfg.get("metadata") or {}
    hook_name = meta.get("hook_name") or cfg.get("hook_name") or cfg.get("hook_point")
    if (meta.get("hook_head_index") if "hook_head_index" in meta else cfg.get("hook_head_index")) is not None:
        raise UnsupportedSiteError("this SAE reads one head (hook_head_index): interplab splices SAEs on whole "
                                   "sites only.")
    arch = cfg.get("architecture")
    kwargs = cfg.get("activation_fn_kwargs") or {}
    if arch is None:  # SAELens before 6.0: a topk activation function made a topk SAE
        arch = "topk" if cfg.get("activation_fn", cfg.get("activation_fn_str")) == "topk" else "standard"
    k = cfg.get("k", kwargs.get("k"))
    norm = cfg.get("normalize_activations")
    norm = ("expected_average_only_in" if norm else "none") if isinstance(norm, bool) or norm is None else norm
    if "scaling_factor" in state:
        if not torch.allclose(state["scaling_factor"], torch.ones_like(state["scaling_factor"])):
            raise LoadError("this SAE has a finetuning scaling_factor other than 1, which interplab does not apply; "
                            "fold it into W_dec first.")
    if "log_threshold" in state and "threshold" not in state:
        state["threshold"] = state["log_threshold"].exp()
    rescale = cfg.get("rescale_acts_by_decoder_norm", False)
    if arch in BATCHTOPK_ARCHITECTURES:  # a training checkpoint: its inference SAE is a jumprelu one
        state, arch, rescale = _batchtopk_as_jumprelu(state, rescale, weights_path, arch), "jumprelu", False
    if arch == "gated" and "b_mag" in state:
        state["b_enc"] = state["b_mag"]  # the magnitude path's bias: what interplab's pre_acts add
    extra = {"jumprelu": ("threshold",), "gated": ("b_gate", "r_mag")}.get(arch, ())
    needed = ("W_enc", "b_mag" if arch == "gated" else "b_enc", "W_dec", "b_dec") + extra
    absent = [n for n in needed if n not in state]
    if absent:
        raise LoadError(f"{weights_path} lacks {', '.join(absent)} (it holds {', '.join(sorted(state))}); a "
                        f"{arch} SAE needs {', '.join(needed)}.")
    site, layer = _where(site, layer, hook_name, str(cfg_path))
    for name, want in (("d_in", state["W_enc"].shape[0]), ("d_sae", state["W_enc"].shape[-1])):
        if name in cfg and cfg[name] != want:
            raise LoadError(f"{cfg_path} says {name}={cfg[name]} but W_enc is {list(state['W_enc'].shape)} "
                            f"([d_in, d_sae]).")
    return SAE(state["W_enc"], state["b_enc"], state["W_dec"], state["b_dec"], site=site, layer=layer,
               architecture=arch, threshold=state.get("threshold"), k=k,
               apply_b_dec_to_input=cfg.get("apply_b_dec_to_input", True), normalize_activations=norm,
               rescale_acts_by_decoder_norm=rescale, hook_name=hook_name, cfg=cfg,
               b_gate=state.get("b_gate"), r_mag=state.get("r_mag"),
               center_input=centred_model(meta.get("model_from_pretrained_kwargs")
                                          or cfg.get("model_from_pretrained_kwargs")) and site != "z")


def _batchtopk_as_jumprelu(state: dict, rescale: bool, weights_path: Path, arch: str) -> dict:
    """A batchtopk (or matryoshka_batchtopk) training checkpoint's tensors as the jumprelu SAE SAELens saves for
    inference: threshold = topk_threshold for every feature; under rescale_acts_by_decoder_norm the decoder's row
    norms are folded into the encoder first (b_enc and W_enc's columns times them, W_dec's rows divided)."""
    absent = [n for n in ("W_enc", "b_enc", "W_dec", "b_dec", "topk_threshold") if n not in state]
    if absent:
        raise LoadError(f"{weights_path} lacks {', '.join(absent)} (it holds {', '.join(sorted(state))}); a {arch} "
                        f"checkpoint holds W_enc, b_enc, W_dec, b_dec and topk_threshold.")
    state = dict(state)
    if state["topk_threshold"].numel() != 1:
        raise LoadError(f"{weights_path}: topk_threshold has {state['topk_threshold'].numel()} values; a {arch} "
                        f"SAE learns one.")
    if rescale:
        norm = state["W_dec"].norm(dim=-1)
        state["b_enc"] = state["b_enc"] * norm
        state["W_enc"] = state["W_enc"] * norm[None, :]
        state["W_dec"] = state["W_dec"] / norm[:, None]
    state["threshold"] = torch.ones_like(state["b_enc"]) * state.pop("topk_threshold").reshape(())
    return state


def _load_npz(file: Path, site, layer) -> SAE:
    import numpy as np

    if not file.is_file():
        raise LoadError(f"no file {file}: a Gemma Scope SAE is a params.npz file.")
    if site is None:
        raise LoadError(f"{file.name} (Gemma Scope) does not say where the SAE reads: give site= and layer=, e.g. "
                        f"SAE.load({str(file)!r}, site='resid_post', layer=12).")
    site, layer = _where(site, layer, None, str(file))
    try:
        with np.load(file) as data:
            state = {("W_" + k[2:] if k.startswith("w_") else k): torch.from_numpy(np.array(data[k])) for k in data}
    except (OSError, ValueError) as e:
        raise LoadError(f"{file} cannot be read as a numpy .npz: {e}") from None
    absent = [n for n in ("W_enc", "b_enc", "W_dec", "b_dec", "threshold") if n not in state]
    if absent:
        raise LoadError(f"{file} lacks {', '.join(absent)} (it holds {', '.join(sorted(state))}); a Gemma Scope "
                        f"params.npz holds W_enc, W_dec, b_enc, b_dec and threshold.")
    # Gemma Scope's JumpReLU SAEs: no decoder bias subtracted before encoding (SAELens's gemma-scope loader)
    return SAE(state["W_enc"], state["b_enc"], state["W_dec"], state["b_dec"], site=site, layer=layer,
               architecture="jumprelu", threshold=state["threshold"], apply_b_dec_to_input=False)


def _load_llama_scope(folder: Path, site, layer) -> tuple[SAE, float]:
    """A Llama Scope folder (hyperparams.json + checkpoints/final.safetensors) as SAELens's llama_scope loader reads
    it: a jumprelu SAE with one threshold for every feature, jump_relu_threshold * s, no b_dec subtracted from the
    input, normalize_activations expected_average_only_in; s = sqrt(d_model) / the dataset's mean input norm (its
    hyperparams), returned to fold when no other factor is given (a release's factor comes first, as in SAELens)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    cfg_path, weights_path = folder / LLAMA_SCOPE_CFG, folder / LLAMA_SCOPE_WEIGHTS
    try:
        hp = json.loads(cfg_path.read_text())
        d_in, norm_in = int(hp["d_model"]), float(hp["dataset_average_activation_norm"]["in"])
        tau, hook_name = float(hp["jump_relu_threshold"]), hp.get("hook_point_in")
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError) as e:
        raise LoadError(f"{cfg_path} is not a Llama Scope hyperparams.json (d_model, jump_relu_threshold, "
                        f"dataset_average_activation_norm.in, hook_point_in): {type(e).__name__} {e}") from None
    if not weights_path.is_file():
        raise LoadError(f"{folder} holds {LLAMA_SCOPE_CFG} but not {LLAMA_SCOPE_WEIGHTS}: a Llama Scope folder holds "
                        f"both.")
    try:
        state = load_file(weights_path)
    except (SafetensorError, OSError) as e:
        raise LoadError(f"{weights_path} cannot be read as safetensors: {e}") from None
    names = ("encoder.weight", "encoder.bias", "decoder.weight", "decoder.bias")
    absent = [n for n in names if n not in state]
    if absent:
        raise LoadError(f"{weights_path} lacks {', '.join(absent)} (it holds {', '.join(sorted(state))}).")
    s = d_in ** 0.5 / norm_in
    site, layer = _where(site, layer, hook_name, str(cfg_path))
    b_enc = state["encoder.bias"]
    sae = SAE(state["encoder.weight"].T, b_enc, state["decoder.weight"].T, state["decoder.bias"], site=site,
              layer=layer, architecture="jumprelu", threshold=torch.full(b_enc.shape, tau * s),
              apply_b_dec_to_input=False, normalize_activations="expected_average_only_in", hook_name=hook_name,
              cfg={"metadata": {"hook_name": hook_name}, "llama_scope": hp})
    return sae, s


def as_sae(obj) -> SAE | None:
    """obj if it is an SAE, else None."""
    return obj if isinstance(obj, SAE) else None


__all__ = ["SAE", "ARCHITECTURES", "SAE_SITES", "EMBEDDED_SAES", "site_of_hook", "as_sae"]
