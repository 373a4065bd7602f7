"""Transcoders: a sparse replacement for each MLP, read from its input (site mlp_in), written to its output (mlp_out).

    tc = ilab.Transcoder.load("path/to/folder")                  # a SAELens transcoder folder (cfg.json + weights)
    tc = ilab.Transcoder.load("params.npz", layer=3)             # a Gemma Scope transcoder file
    tcs = ilab.Transcoders.load("ioi-tiny-transcoders")          # one per layer: the set shipped with ioi-tiny
    tcs = ilab.Transcoders.load("folder")                        # a folder of layer_0/, layer_1/, ... transcoders
    tcs = ilab.Transcoders.load("set/config.yaml")               # circuit-tracer's transcoder set (or its folder)
    clt = ilab.CrossLayerTranscoder.load("clt_folder")           # circuit-tracer's W_enc_N / W_dec_N.safetensors
    f = tc.encode(x)           # [..., d_in] -> [..., d_tc]
    y = tc.decode(f)           # [..., d_tc] -> [..., d_out]   (no skip term)
    y = tc(x)                  # decode(encode(x)) + x @ W_skip where the transcoder has a skip connection

The arithmetic is SAELens's transcoder (and circuit-tracer's single-layer transcoder), written out here:
    pre = x @ W_enc + b_enc   (no input centring)
    relu: f = relu(pre)   jumprelu: f = relu(pre) * (pre > threshold)   topk: the k largest pre, ReLU'd, 0 elsewhere
    out = f @ W_dec + b_dec  (+ x @ W_skip)
circuit-tracer's JumpReLU has no ReLU: f = pre * (pre > threshold) (gate_only=True, as its files are read; its
CrossLayerTranscoder's too). The two differ only where a threshold is negative: there a pre-activation in
(threshold, 0) passes, negative. Gemma Scope's params.npz keep their own JumpReLU (with the ReLU); their thresholds
are positive.

The skip term is linear in the MLP's input: in the replacement model of an attribution graph it is no node but a
path, along which gradients flow from the MLP's output to its input (as circuit-tracer's skip + (out - skip).detach()).

circuit-tracer's files: a transcoder set's config.yaml (model_kind: transcoder_set, feature_input_hook,
feature_output_hook, `transcoders`: one path per layer, relative to the config or hf://; without it, the
layer_N.safetensors beside it), each file W_enc [d_tc, d_in], W_dec [d_tc, d_out], b_enc, b_dec, W_skip (applied as
x @ W_skip.T) and activation_function.threshold for a JumpReLU (gate only; a ReLU without it). Its hooks must be the
MLP's input and output (mlp.hook_in / ln2.hook_normalized, mlp.hook_out / hook_mlp_out): a set read elsewhere
(hook_resid_mid) would replace nothing here, and is refused.

A cross-layer transcoder (CrossLayerTranscoder, circuit-tracer's CLT): one encoder per layer, each feature read at
layer l writing to every MLP l' >= l through its own decoder; MLP l''s output is the sum of every earlier layer's
features' decoders to it plus b_dec[l]. Transcoders and CrossLayerTranscoder answer one interface, which the
replacement model and the attribution graph read: encode_at(layer, x), W_enc_at(layer), decoders_of(layer),
output_at(layer, acts, x), skip_at(layer), check_fits(engine) (a set of another layer count or width: OutOfRangeError).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import torch

from .errors import LoadError, OutOfRangeError
from .hub import hub_folder

ACTIVATIONS = ("relu", "jumprelu", "topk")
EMBEDDED = {"ioi-tiny-transcoders": Path(__file__).parent / "zoo" / "ioi_tiny_transcoders"}
CFG_FILE, WEIGHTS_FILE = "cfg.json", "sae_weights.safetensors"
CT_CONFIG = "config.yaml"  # circuit-tracer's transcoder config
# SAELens's transcoder architectures -> the activation
SAELENS_ARCHS = {"transcoder": "relu", "skip_transcoder": "relu", "jumprelu_transcoder": "jumprelu",
                 "jumprelu_skip_transcoder": "jumprelu"}


class Transcoder:
    """One layer's transcoder: reads the MLP's input at `layer`, predicts its output."""

    def __init__(self, W_enc, b_enc, W_dec, b_dec, *, layer: int, activation: str = "relu", threshold=None,
                 k: int | None = None, W_skip=None, gate_only: bool = False, source: str | None = None):
        if activation not in ACTIVATIONS:
            raise LoadError(f"transcoder activation {activation!r}: interplab reads {', '.join(ACTIVATIONS)}.")
        if isinstance(layer, bool) or not isinstance(layer, int) or layer < 0:
            raise LoadError(f"a transcoder needs its layer (an int >= 0), got {layer!r}: pass layer= to load it.")
        self.W_enc, self.b_enc, self.W_dec, self.b_dec = (_tensor(t, n) for t, n in (
            (W_enc, "W_enc"), (b_enc, "b_enc"), (W_dec, "W_dec"), (b_dec, "b_dec")))
        if self.W_enc.dim() != 2 or self.W_dec.dim() != 2:
            raise LoadError(f"W_enc and W_dec must be matrices; got shapes {list(self.W_enc.shape)} and "
                            f"{list(self.W_dec.shape)}.")
        d_in, d_tc = self.W_enc.shape
        d_out = self.W_dec.shape[1]
        expect = {"b_enc": (d_tc,), "W_dec": (d_tc, d_out), "b_dec": (d_out,)}
        self.threshold = _tensor(threshold, "threshold") if threshold is not None else None
        self.W_skip = _tensor(W_skip, "W_skip") if W_skip is not None else None
        if activation == "jumprelu":
            if self.threshold is None:
                raise LoadError("a jumprelu transcoder needs its threshold tensor [d_tc]; none was found.")
            expect["threshold"] = (d_tc,)
        if self.W_skip is not None:
            expect["W_skip"] = (d_in, d_out)
        for name, shape in expect.items():
            if tuple(getattr(self, name).shape) != shape:
                raise LoadError(f"transcoder tensor {name} has shape {list(getattr(self, name).shape)}, expected "
                                f"{list(shape)} (W_enc is [d_in, d_tc], W_dec [d_tc, d_out], as SAELens saves them).")
        if activation == "topk" and (isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= d_tc):
            raise LoadError(f"a topk transcoder needs k, an int in 1..{d_tc}; got {k!r}.")
        if gate_only and activation != "jumprelu":
            raise LoadError(f"gate_only=True is circuit-tracer's JumpReLU (pre * (pre > threshold)); this transcoder's "
                            f"activation is {activation!r}.")
        self.gate_only = bool(gate_only)
        self.d_in, self.d_tc, self.d_out = int(d_in), int(d_tc), int(d_out)
        self.layer, self.activation, self.k = layer, activation, k if activation == "topk" else None
        self.source = source

    def __repr__(self) -> str:
        skip = ", skip" if self.W_skip is not None else ""
        return (f"Transcoder(layer {self.layer}: mlp_in -> mlp_out, {self.d_tc} features, {self.activation}"
                f"{' (gate only)' if self.gate_only else ''}{f' k={self.k}' if self.k else ''}{skip})")

    @property
    def site(self) -> str:
        return "mlp_in"  # where it reads (it writes mlp_out)

    @property
    def digest(self) -> str:
        """A hash of the weights and settings: what identifies this transcoder in a cache key (as SAE.digest)."""
        h = hashlib.blake2b(digest_size=16)
        for t in (self.W_enc, self.b_enc, self.W_dec, self.b_dec, self.threshold, self.W_skip):
            if t is not None:
                h.update(t.detach().cpu().contiguous().float().numpy().tobytes())
        h.update(repr((self.activation, self.k, self.layer) + ((True,) if self.gate_only else ())).encode())
        return h.hexdigest()

    # ---- arithmetic ----------------------------------------------------------------------------------------
    def _w(self, name: str, like: torch.Tensor) -> torch.Tensor:
        return getattr(self, name).to(like.device, like.dtype)

    def pre_acts(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.d_in:
            raise OutOfRangeError(f"the transcoder of layer {self.layer} reads [..., {self.d_in}]; got "
                                  f"{list(x.shape)}.")
        return x @ self._w("W_enc", x) + self._w("b_enc", x)

    def activate(self, pre: torch.Tensor) -> torch.Tensor:
        if self.activation == "relu":
            return pre.relu()
        if self.activation == "jumprelu":
            return (pre if self.gate_only else pre.relu()) * (pre > self._w("threshold", pre))
        v, i = pre.topk(self.k, dim=-1)
        return torch.zeros_like(pre).scatter(-1, i, v.relu())

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return self.activate(self.pre_acts(x))

    def decode(self, f: torch.Tensor) -> torch.Tensor:
        return f @ self._w("W_dec", f) + self._w("b_dec", f)

    def skip(self, x: torch.Tensor) -> torch.Tensor | None:
        return None if self.W_skip is None else x @ self._w("W_skip", x)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        out = self.decode(self.encode(x))
        s = self.skip(x)
        return out if s is None else out + s

    # ---- loading -------------------------------------------------------------------------------------------
    @classmethod
    def load(cls, source: str | os.PathLike, *, layer: int | None = None, path: str | None = None,
             revision: str | None = None) -> Transcoder:
        """A transcoder from a SAELens transcoder folder (cfg.json + sae_weights.safetensors), a Gemma Scope
        transcoder params.npz (give layer=), or a hub repository ('org/repo' with path= the folder inside it).

        layer: the MLP it replaces; read from cfg.json's hook_name (blocks.L....) when not given."""
        where = _resolve(source, path, revision)
        if where.is_dir() and not (where / CFG_FILE).exists() and (where / "params.npz").exists():
            where = where / "params.npz"
        if where.suffix == ".npz":
            return _load_npz(where, layer)
        return _load_saelens(where, layer)


class Transcoders:
    """One transcoder per layer of a model (per-layer transcoders: each MLP replaced by its own).

    What the replacement model and the attribution graph read of a set (CrossLayerTranscoder answers the same):
    encode_at(layer, x), W_enc_at(layer), decoders_of(layer) [(target layer, W_dec)], output_at(layer, acts, x)
    (the transcoders' prediction of MLP `layer`'s output: decoders, b_dec and the skip term), skip_at(layer)."""

    def __init__(self, transcoders: list[Transcoder], source: str | None = None):
        layers = [t.layer for t in transcoders]
        if not transcoders or layers != list(range(len(transcoders))):
            raise LoadError(f"a transcoder set needs one transcoder per layer 0..n-1 in order; got layers {layers}.")
        self.layers = list(transcoders)
        self.source = source

    def __len__(self) -> int:
        return len(self.layers)

    def __getitem__(self, layer: int) -> Transcoder:
        return self.layers[layer]

    def __iter__(self):
        return iter(self.layers)

    def __repr__(self) -> str:
        t = self.layers[0]
        return (f"Transcoders({len(self)} layers, {t.d_tc} features each, {t.activation}"
                f"{f' k={t.k}' if t.k else ''}{', skip' if self.has_skip else ''}"
                f"{', from ' + self.source if self.source else ''})")

    # ---- what the replacement model reads (shared with CrossLayerTranscoder) -------------------------------
    @property
    def d_tc(self) -> int:
        return max(t.d_tc for t in self.layers)

    @property
    def has_skip(self) -> bool:
        return any(t.W_skip is not None for t in self.layers)

    def encode_at(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        return self.layers[layer].encode(x)

    def W_enc_at(self, layer: int) -> torch.Tensor:
        return self.layers[layer].W_enc

    def decoders_of(self, layer: int) -> list[tuple[int, torch.Tensor]]:
        """[(target layer, W_dec [d_tc, d_out])]: where the features read at `layer` write (here: that layer)."""
        return [(layer, self.layers[layer].W_dec)]

    def skip_at(self, layer: int) -> torch.Tensor | None:
        return self.layers[layer].W_skip

    def output_at(self, layer: int, acts: list[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        """MLP `layer`'s output as the transcoders predict it, from the features of every layer up to it (acts[l]:
        layer l's activations) and this MLP's input x (for the skip term)."""
        t = self.layers[layer]
        out = t.decode(acts[layer])
        s = t.skip(x)
        return out if s is None else out + s

    @classmethod
    def load(cls, source: str | os.PathLike, *, revision: str | None = None) -> Transcoders:
        """'ioi-tiny-transcoders', a folder holding one transcoder folder per layer (layer_0, layer_1, ...), or a
        transcoder set in circuit-tracer's format: its config.yaml (model_kind: transcoder_set, the per-layer
        files under `transcoders`) or a folder of layer_N.safetensors."""
        where = _resolve(source, None, revision)
        if where.is_file() and where.suffix in (".yaml", ".yml") or (where / CT_CONFIG).is_file():
            return _load_circuit_tracer_set(where if where.is_file() else where / CT_CONFIG, str(source))
        if not where.is_dir():
            raise LoadError(f"{str(source)!r} is a file: a transcoder set is a folder (or circuit-tracer's "
                            f"{CT_CONFIG}); for one transcoder use Transcoder.load.")
        if (where / "W_enc_0.safetensors").exists():
            raise LoadError(f"{str(source)!r} holds a cross-layer transcoder (W_enc_0.safetensors, ...): load it "
                            f"with ilab.CrossLayerTranscoder.load.")
        ct_files = {int(m.group(1)): f for f in where.iterdir()
                    if (m := re.fullmatch(r"layer_(\d+)\.safetensors", f.name))}
        if ct_files:
            return cls(_circuit_tracer_layers(ct_files, str(source)), source=str(source))
        folders = {int(m.group(1)): d for d in where.iterdir() if d.is_dir()
                   and (m := re.fullmatch(r"(?:layer_?|blocks\.)(\d+)\D*", d.name))}
        if not folders:
            raise LoadError(f"{str(source)!r} holds no per-layer transcoder folders (layer_0, layer_1, ...), no "
                            f"circuit-tracer {CT_CONFIG} and no layer_N.safetensors. For one transcoder use "
                            f"Transcoder.load.")
        return cls([Transcoder.load(folders[i], layer=i) for i in sorted(folders)], source=str(source))

    def check_fits(self, engine) -> None:
        """Raises OutOfRangeError unless there is one transcoder per layer of this model, of its width."""
        _check_fits(len(self), [(t.layer, t.d_in, t.d_out) for t in self.layers], engine)


def _check_fits(n_layers: int, widths: list[tuple[int, int, int]], engine) -> None:
    if n_layers != engine.n_layers:
        raise OutOfRangeError(f"transcoders over {n_layers} layers for a model of {engine.n_layers} layers: an "
                              f"attribution graph needs one encoder per layer (load the set made for this model).")
    for layer, d_in, d_out in widths:
        if d_in != engine.d_model or d_out != engine.d_model:
            raise OutOfRangeError(f"the transcoder of layer {layer} maps {d_in} -> {d_out}, but this model's MLPs "
                                  f"map {engine.d_model} -> {engine.d_model}: it was made for another model.")


def _tensor(t, name: str) -> torch.Tensor:
    if isinstance(t, torch.Tensor):
        return t.detach().float()
    try:
        return torch.as_tensor(t).float()
    except (TypeError, ValueError, RuntimeError) as e:
        raise LoadError(f"transcoder tensor {name}: not a tensor ({type(t).__name__}: {e}).") from None


def _resolve(source, path, revision) -> Path:
    if not isinstance(source, (str, os.PathLike)) or not str(source):
        raise LoadError(f"Transcoder.load needs a folder, a params.npz file, 'ioi-tiny-transcoders' or a hub id; got "
                        f"{type(source).__name__} {source!r}.")
    text = str(source)
    if text in EMBEDDED:
        return EMBEDDED[text]
    if Path(text).expanduser().exists():
        where = Path(text).expanduser()
        return where / path if path else where
    if text.startswith("hf://") or (path is not None and re.fullmatch(r"[\w.-]+/[\w.-]+", text)):
        return hub_folder(text, path, revision, what="transcoder")
    raise LoadError(f"no transcoder at {text!r}: not a folder or file here, not 'ioi-tiny-transcoders', not a hub id "
                    f"('org/repo' with path=). A SAELens transcoder folder holds {CFG_FILE} and {WEIGHTS_FILE}.")


def _layer_of(cfg: dict, layer) -> int | None:
    if layer is not None:
        return layer
    hook = cfg.get("hook_name") or cfg.get("metadata", {}).get("hook_name") or ""
    m = re.match(r"blocks\.(\d+)\.", hook)
    return int(m.group(1)) if m else None


def _load_saelens(folder: Path, layer) -> Transcoder:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    if not (folder / CFG_FILE).exists() or not (folder / WEIGHTS_FILE).exists():
        raise LoadError(f"{folder} is not a SAELens transcoder folder: it needs {CFG_FILE} and {WEIGHTS_FILE}.")
    try:
        cfg = json.loads((folder / CFG_FILE).read_text())
        w = load_file(folder / WEIGHTS_FILE)
    except (SafetensorError, OSError, ValueError) as e:
        raise LoadError(f"could not read the transcoder in {folder}: {e}") from None
    arch = cfg.get("architecture", "transcoder")
    activation = cfg.get("activation") or SAELENS_ARCHS.get(arch)
    if activation is None:
        raise LoadError(f"{folder}: architecture {arch!r} is not a transcoder SAELens writes "
                        f"({', '.join(SAELENS_ARCHS)}); for an SAE use ilab.SAE.load.")
    missing = [n for n in ("W_enc", "b_enc", "W_dec", "b_dec") if n not in w]
    if missing:
        raise LoadError(f"{folder / WEIGHTS_FILE} lacks {', '.join(missing)}.")
    return Transcoder(w["W_enc"], w["b_enc"], w["W_dec"], w["b_dec"], layer=_layer_of(cfg, layer),
                      activation=activation, threshold=w.get("threshold"), k=cfg.get("k"), W_skip=w.get("W_skip"),
                      source=str(folder))


def _load_npz(file: Path, layer) -> Transcoder:
    import numpy as np

    if layer is None:
        raise LoadError(f"{file}: a Gemma Scope transcoder file does not say its layer: "
                        f"Transcoder.load({str(file)!r}, layer=<the MLP it replaces>).")
    try:
        with np.load(file) as z:
            w = {k: torch.from_numpy(z[k]) for k in z.files}
    except (OSError, ValueError) as e:
        raise LoadError(f"could not read {file}: {e}") from None
    missing = [n for n in ("W_enc", "b_enc", "W_dec", "b_dec") if n not in w]
    if missing:
        raise LoadError(f"{file} lacks {', '.join(missing)} (Gemma Scope transcoders hold W_enc, b_enc, W_dec, b_dec, "
                        f"threshold).")
    activation = "jumprelu" if "threshold" in w else "relu"
    return Transcoder(w["W_enc"], w["b_enc"], w["W_dec"], w["b_dec"], layer=layer, activation=activation,
                      threshold=w.get("threshold"), W_skip=w.get("W_skip"), source=str(file))


# ---- circuit-tracer's formats ----------------------------------------------------------------------------------
# Where circuit-tracer's configs say features read and write. interplab's transcoders read the MLP's input (after
# the norm in front of it: site mlp_in) and write its output (mlp_out); a set made for another place (e.g. the
# residual stream before the norm, hook_resid_mid) is refused rather than read at the wrong site.
CT_INPUT_HOOKS = ("mlp.hook_in", "ln2.hook_normalized", "hook_mlp_in")
CT_OUTPUT_HOOKS = ("mlp.hook_out", "hook_mlp_out")


def _read_yaml(file: Path) -> dict:
    import yaml

    try:
        config = yaml.safe_load(file.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise LoadError(f"could not read circuit-tracer's config {file}: {e}") from None
    if not isinstance(config, dict):
        raise LoadError(f"{file} is not a circuit-tracer transcoder config (a mapping with model_kind, "
                        f"feature_input_hook, feature_output_hook).")
    return config


def _check_hooks(config: dict, file) -> None:
    hooks = config.get("feature_input_hook"), config.get("feature_output_hook")
    if hooks[0] not in CT_INPUT_HOOKS or hooks[1] not in CT_OUTPUT_HOOKS:
        raise LoadError(f"{file}: features read {hooks[0]!r} and write {hooks[1]!r}; interplab's transcoders read the "
                        f"MLP's input ({' or '.join(CT_INPUT_HOOKS)}) and write its output "
                        f"({' or '.join(CT_OUTPUT_HOOKS)}). A set made for other hooks cannot replace the MLPs.")


def _local(text: str, base: Path) -> Path:
    """A path named in a config: hf:// from the hub (cache, else download), else relative to the config's folder."""
    if text.startswith("hf://"):
        return hub_folder(text, None, None, what="transcoder")
    p = Path(text).expanduser()
    return p if p.is_absolute() or not (base / p).exists() else base / p


def _load_circuit_tracer_set(file: Path, source: str) -> Transcoders:
    config = _read_yaml(file)
    kind = config.get("model_kind")
    if kind == "cross_layer_transcoder":
        raise LoadError(f"{file} describes a cross-layer transcoder: load its folder (W_enc_N/W_dec_N.safetensors) "
                        f"with ilab.CrossLayerTranscoder.load.")
    if kind != "transcoder_set":
        raise LoadError(f"{file}: model_kind {kind!r}; circuit-tracer's transcoder sets say 'transcoder_set'.")
    _check_hooks(config, file)
    paths = config.get("transcoders")
    if paths is None:  # circuit-tracer then reads layer_N.safetensors beside the config
        files = {int(m.group(1)): f for f in file.parent.iterdir()
                 if (m := re.fullmatch(r"layer_(\d+)\.safetensors", f.name))}
    elif isinstance(paths, list) and all(isinstance(p, str) for p in paths):
        files = {i: _local(p, file.parent) for i, p in enumerate(paths)}
    else:
        raise LoadError(f"{file}: 'transcoders' must be a list of paths (one per layer, in order); got {paths!r}.")
    if not files:
        raise LoadError(f"{file} names no transcoders and there is no layer_N.safetensors beside it.")
    return Transcoders(_circuit_tracer_layers(files, source), source=source)


def _circuit_tracer_layers(files: dict[int, Path], source: str) -> list[Transcoder]:
    if sorted(files) != list(range(len(files))):
        raise LoadError(f"{source}: circuit-tracer's per-layer files must cover layers 0..n-1; got {sorted(files)}.")
    return [_load_circuit_tracer_layer(Path(files[i]), i) for i in range(len(files))]


def _safetensors(file: Path, needed: tuple[str, ...], hint: str) -> dict:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    if not file.is_file():
        raise LoadError(f"{file} does not exist ({hint}).")
    try:
        w = load_file(file)
    except (SafetensorError, OSError, ValueError) as e:
        raise LoadError(f"could not read {file}: {e}") from None
    missing = [n for n in needed if n not in w]
    if missing:
        raise LoadError(f"{file} lacks {', '.join(missing)} ({hint}).")
    return w


def _load_circuit_tracer_layer(file: Path, layer: int) -> Transcoder:
    """circuit-tracer's single-layer file: W_enc [d_tc, d_in], W_dec [d_tc, d_out], b_enc, b_dec, W_skip applied as
    x @ W_skip.T, and activation_function.threshold for a JumpReLU (circuit-tracer's: gate only; a ReLU without it)."""
    w = _safetensors(file, ("W_enc", "W_dec", "b_enc", "b_dec"),
                     "circuit-tracer's layer files hold W_enc, W_dec, b_enc, b_dec and optionally W_skip and "
                     "activation_function.threshold")
    if w["W_enc"].dim() != 2 or ("W_skip" in w and w["W_skip"].dim() != 2):
        raise LoadError(f"{file}: W_enc and W_skip must be matrices; got {list(w['W_enc'].shape)}.")
    threshold = w.get("activation_function.threshold")
    skip = w.get("W_skip")
    return Transcoder(w["W_enc"].T, w["b_enc"], w["W_dec"], w["b_dec"], layer=layer,
                      activation="relu" if threshold is None else "jumprelu", threshold=threshold,
                      gate_only=threshold is not None,
                      W_skip=None if skip is None else skip.T, source=str(file))


class CrossLayerTranscoder:
    """A cross-layer transcoder (circuit-tracer's CLT): one encoder per layer, reading that layer's MLP input; each
    feature read at layer l writes to the output of every MLP l' >= l through its own decoder W_dec[l][:, l' - l].

    The arithmetic (circuit-tracer's CrossLayerTranscoder, written out here):
        f_l = act(x_l @ W_enc[l] + b_enc[l])      act: relu, or jumprelu with threshold[l] (f * (f > threshold))
        out_l' = sum over l <= l' of f_l @ W_dec[l][:, l' - l] + b_dec[l']  (+ x_l' @ W_skip[l'])
    Shapes (interplab's convention, as SAELens's: W_enc[l] [d_in, d_tc]): W_enc [n_layers, d_in, d_tc], b_enc
    [n_layers, d_tc], W_dec: a list, W_dec[l] [d_tc, n_layers - l, d_out], b_dec [n_layers, d_out], threshold
    [n_layers, d_tc], W_skip [n_layers, d_in, d_out]."""

    def __init__(self, W_enc, b_enc, W_dec: list, b_dec, *, threshold=None, W_skip=None, source: str | None = None):
        self.W_enc, self.b_enc, self.b_dec = (_tensor(t, n) for t, n in ((W_enc, "W_enc"), (b_enc, "b_enc"),
                                                                         (b_dec, "b_dec")))
        if self.W_enc.dim() != 3:
            raise LoadError(f"a cross-layer transcoder's W_enc is [n_layers, d_in, d_tc]; got "
                            f"{list(self.W_enc.shape)}.")
        n, d_in, d_tc = self.W_enc.shape
        if not isinstance(W_dec, (list, tuple)) or len(W_dec) != n:
            got = f"{len(W_dec)} tensors" if isinstance(W_dec, (list, tuple)) else type(W_dec).__name__
            raise LoadError(f"a cross-layer transcoder's W_dec is a list of one tensor per layer ({n}: W_dec[l] "
                            f"[d_tc, n_layers - l, d_out]); got {got}.")
        self.W_dec = [_tensor(t, f"W_dec[{i}]") for i, t in enumerate(W_dec)]
        d_out = self.b_dec.shape[-1] if self.b_dec.dim() == 2 else -1
        self.threshold = _tensor(threshold, "threshold") if threshold is not None else None
        self.W_skip = _tensor(W_skip, "W_skip") if W_skip is not None else None
        expect = {"b_enc": (n, d_tc), "b_dec": (n, d_out)}
        expect.update({f"W_dec[{i}]": (d_tc, n - i, d_out) for i in range(n)})
        if self.threshold is not None:
            expect["threshold"] = (n, d_tc)
        if self.W_skip is not None:
            expect["W_skip"] = (n, d_in, d_out)
        for name, shape in expect.items():
            have = self.W_dec[int(name[6:-1])] if name.startswith("W_dec[") else getattr(self, name)
            if tuple(have.shape) != shape:
                raise LoadError(f"cross-layer transcoder tensor {name} has shape {list(have.shape)}, expected "
                                f"{list(shape)} (W_enc [n_layers, d_in, d_tc]: {list(self.W_enc.shape)}).")
        self.n_layers, self.d_in, self.d_tc, self.d_out = int(n), int(d_in), int(d_tc), int(d_out)
        self.activation = "relu" if self.threshold is None else "jumprelu"
        self.source = source

    def __len__(self) -> int:
        return self.n_layers

    def __repr__(self) -> str:
        return (f"CrossLayerTranscoder({self.n_layers} layers, {self.d_tc} features per layer, {self.activation}"
                f"{', skip' if self.has_skip else ''}{', from ' + self.source if self.source else ''})")

    @property
    def has_skip(self) -> bool:
        return self.W_skip is not None

    # ---- what the replacement model reads (as Transcoders) -------------------------------------------------
    def _layer(self, layer) -> int:
        if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < self.n_layers:
            raise OutOfRangeError(f"layer={layer!r}: this cross-layer transcoder has layers 0..{self.n_layers - 1}.")
        return layer

    def encode_at(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        layer = self._layer(layer)
        if x.shape[-1] != self.d_in:
            raise OutOfRangeError(f"the cross-layer transcoder reads [..., {self.d_in}]; got {list(x.shape)}.")
        pre = x @ self.W_enc[layer].to(x.device, x.dtype) + self.b_enc[layer].to(x.device, x.dtype)
        if self.threshold is None:
            return pre.relu()
        return pre * (pre > self.threshold[layer].to(x.device, x.dtype))

    def W_enc_at(self, layer: int) -> torch.Tensor:
        return self.W_enc[self._layer(layer)]

    def decoders_of(self, layer: int) -> list[tuple[int, torch.Tensor]]:
        """[(target layer, W_dec [d_tc, d_out])] for every MLP from `layer` on."""
        layer = self._layer(layer)
        return [(layer + j, self.W_dec[layer][:, j]) for j in range(self.n_layers - layer)]

    def skip_at(self, layer: int) -> torch.Tensor | None:
        return None if self.W_skip is None else self.W_skip[self._layer(layer)]

    def output_at(self, layer: int, acts: list[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        """MLP `layer`'s output as the CLT predicts it: every earlier (and this) layer's features through their
        decoders to this layer, b_dec, and the skip term of this MLP's input x."""
        layer = self._layer(layer)
        out = self.b_dec[layer].to(x.device, x.dtype).expand(*x.shape[:-1], self.d_out)
        for source in range(layer + 1):
            out = out + acts[source] @ self.W_dec[source][:, layer - source].to(x.device, x.dtype)
        skip = self.skip_at(layer)
        return out if skip is None else out + x @ skip.to(x.device, x.dtype)

    def check_fits(self, engine) -> None:
        """Raises OutOfRangeError unless it has one encoder per layer of this model, of its width."""
        _check_fits(self.n_layers, [(layer, self.d_in, self.d_out) for layer in range(self.n_layers)], engine)

    @property
    def digest(self) -> str:
        h = hashlib.blake2b(digest_size=16)
        for t in (self.W_enc, self.b_enc, *self.W_dec, self.b_dec, self.threshold, self.W_skip):
            if t is not None:
                h.update(t.detach().cpu().contiguous().float().numpy().tobytes())
        return h.hexdigest()

    @classmethod
    def load(cls, source: str | os.PathLike, *, path: str | None = None,
             revision: str | None = None) -> CrossLayerTranscoder:
        """A CLT in circuit-tracer's format: a folder of W_enc_N.safetensors (W_enc_N [d_tc, d_in], b_enc_N,
        b_dec_N, threshold_N for a JumpReLU) and W_dec_N.safetensors (W_dec_N [d_tc, n_layers - N, d_out]), one
        pair per layer, as circuit-tracer's load_clt reads and its to_safetensors writes; a config.yaml beside them
        (model_kind: cross_layer_transcoder) is checked for where the features read and write. Or a hub id
        ('org/repo' with path=)."""
        where = _resolve(source, path, revision)
        if where.is_file() and where.suffix in (".yaml", ".yml"):
            where = where.parent
        if not where.is_dir():
            raise LoadError(f"{str(source)!r}: a cross-layer transcoder is a folder of W_enc_N.safetensors and "
                            f"W_dec_N.safetensors (circuit-tracer's format).")
        if (where / CT_CONFIG).is_file():
            config = _read_yaml(where / CT_CONFIG)
            if config.get("model_kind") != "cross_layer_transcoder":
                raise LoadError(f"{where / CT_CONFIG}: model_kind {config.get('model_kind')!r}; a cross-layer "
                                f"transcoder's says 'cross_layer_transcoder' (a transcoder_set: "
                                f"ilab.Transcoders.load).")
            _check_hooks(config, where / CT_CONFIG)
        layers = sorted(int(m.group(1)) for f in where.iterdir() if (m := re.fullmatch(r"W_enc_(\d+)\.safetensors",
                                                                                          f.name)))
        if not layers or layers != list(range(len(layers))):
            raise LoadError(f"{where} holds no cross-layer transcoder: circuit-tracer's format is W_enc_0.safetensors, "
                            f"W_dec_0.safetensors, ... one pair per layer 0..n-1 (found encoders {layers}).")
        hint = "circuit-tracer's CLT files: W_enc_N.safetensors holds W_enc_N, b_enc_N, b_dec_N (threshold_N), " \
               "W_dec_N.safetensors holds W_dec_N"
        enc, dec = [], []
        for i in layers:
            enc.append(_safetensors(where / f"W_enc_{i}.safetensors", (f"W_enc_{i}", f"b_enc_{i}", f"b_dec_{i}"),
                                    hint))
            dec.append(_safetensors(where / f"W_dec_{i}.safetensors", (f"W_dec_{i}",), hint)[f"W_dec_{i}"])
        has_threshold = [f"threshold_{i}" in e for i, e in enumerate(enc)]
        if any(has_threshold) and not all(has_threshold):
            raise LoadError(f"{where}: threshold_N in some encoder files but not all ({has_threshold}).")
        shapes = {tuple(e[f"W_enc_{i}"].shape) for i, e in enumerate(enc)}
        if len(shapes) != 1 or len(next(iter(shapes))) != 2:
            raise LoadError(f"{where}: every W_enc_N must be one [d_tc, d_in] shape; got {sorted(shapes)}.")
        stack = lambda name: torch.stack([e[f"{name}_{i}"] for i, e in enumerate(enc)])  # noqa: E731
        return cls(stack("W_enc").transpose(1, 2), stack("b_enc"), dec, stack("b_dec"),
                   threshold=stack("threshold") if all(has_threshold) else None, source=str(source))


TRANSCODER_SETS = (Transcoders, CrossLayerTranscoder)  # what the replacement model and attribution graphs take
