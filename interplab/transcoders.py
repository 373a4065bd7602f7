"""Transcoders: a sparse replacement for each MLP, read from its input (site mlp_in), written to its output (mlp_out).

    tc = ilab.Transcoder.load("path/to/folder")                  # a SAELens transcoder folder (cfg.json + weights)
    tc = ilab.Transcoder.load("params.npz", layer=3)             # a Gemma Scope transcoder file
    tcs = ilab.Transcoders.load("ioi-tiny-transcoders")          # one per layer: the set shipped with ioi-tiny
    tcs = ilab.Transcoders.load("folder")                        # a folder of layer_0/, layer_1/, ... transcoders
    f = tc.encode(x)           # [..., d_in] -> [..., d_tc]
    y = tc.decode(f)           # [..., d_tc] -> [..., d_out]   (no skip term)
    y = tc(x)                  # decode(encode(x)) + x @ W_skip where the transcoder has a skip connection

The arithmetic is SAELens's transcoder (and circuit-tracer's single-layer transcoder), written out here:
    pre = x @ W_enc + b_enc   (no input centring)
    relu: f = relu(pre)   jumprelu: f = relu(pre) * (pre > threshold)   topk: the k largest pre, ReLU'd, 0 elsewhere
    out = f @ W_dec + b_dec  (+ x @ W_skip)
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
# SAELens's transcoder architectures -> the activation
SAELENS_ARCHS = {"transcoder": "relu", "skip_transcoder": "relu", "jumprelu_transcoder": "jumprelu",
                 "jumprelu_skip_transcoder": "jumprelu"}


class Transcoder:
    """One layer's transcoder: reads the MLP's input at `layer`, predicts its output."""

    def __init__(self, W_enc, b_enc, W_dec, b_dec, *, layer: int, activation: str = "relu", threshold=None,
                 k: int | None = None, W_skip=None, source: str | None = None):
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
        self.d_in, self.d_tc, self.d_out = int(d_in), int(d_tc), int(d_out)
        self.layer, self.activation, self.k = layer, activation, k if activation == "topk" else None
        self.source = source

    def __repr__(self) -> str:
        skip = ", skip" if self.W_skip is not None else ""
        return (f"Transcoder(layer {self.layer}: mlp_in -> mlp_out, {self.d_tc} features, {self.activation}"
                f"{f' k={self.k}' if self.k else ''}{skip})")

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
        h.update(repr((self.activation, self.k, self.layer)).encode())
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
            return pre.relu() * (pre > self._w("threshold", pre))
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
    """One transcoder per layer of a model (per-layer transcoders: each MLP replaced by its own)."""

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
                f"{f' k={t.k}' if t.k else ''}{', from ' + self.source if self.source else ''})")

    @classmethod
    def load(cls, source: str | os.PathLike, *, revision: str | None = None) -> Transcoders:
        """'ioi-tiny-transcoders', or a folder holding one transcoder folder per layer (layer_0, layer_1, ...)."""
        where = _resolve(source, None, revision)
        folders = {int(m.group(1)): d for d in where.iterdir() if d.is_dir()
                   and (m := re.fullmatch(r"(?:layer_?|blocks\.)(\d+)\D*", d.name))}
        if not folders:
            raise LoadError(f"{str(source)!r} holds no per-layer transcoder folders (layer_0, layer_1, ...). "
                            f"For one transcoder use Transcoder.load.")
        return cls([Transcoder.load(folders[i], layer=i) for i in sorted(folders)], source=str(source))

    def check_fits(self, engine) -> None:
        """Raises OutOfRangeError unless there is one transcoder per layer of this model, of its width."""
        if len(self) != engine.n_layers:
            raise OutOfRangeError(f"{len(self)} transcoders for a model of {engine.n_layers} layers: an attribution "
                                  f"graph needs one transcoder per layer (load the set made for this model).")
        for t in self.layers:
            if t.d_in != engine.d_model or t.d_out != engine.d_model:
                raise OutOfRangeError(f"the transcoder of layer {t.layer} maps {t.d_in} -> {t.d_out}, but this "
                                      f"model's MLPs map {engine.d_model} -> {engine.d_model}: it was made for "
                                      f"another model.")


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
    from safetensors.torch import load_file

    if not (folder / CFG_FILE).exists() or not (folder / WEIGHTS_FILE).exists():
        raise LoadError(f"{folder} is not a SAELens transcoder folder: it needs {CFG_FILE} and {WEIGHTS_FILE}.")
    try:
        cfg = json.loads((folder / CFG_FILE).read_text())
        w = load_file(folder / WEIGHTS_FILE)
    except (OSError, ValueError) as e:
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
