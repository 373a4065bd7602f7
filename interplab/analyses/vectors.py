"""Steering vectors: build them from contrast prompts, keep them with where they came from, save and load them.

    v = ilab.analyses.vectors.diff_of_means(lab, ["I love it"], ["I hate it"], site="resid_post", layer=3)
    sv = ilab.analyses.vectors.from_tensor(v, site="resid_post", layer=3, model_id=lab.model_id)
    ilab.analyses.vectors.save("love.safetensors", sv)
    lab.generate("I think", [ilab.analyses.vectors.load("love.safetensors").steer(alpha=4.0)])
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import torch

from ..edits import Edit, as_tensor, clamp, project, steer
from ..engine import engine_of
from ..errors import InterplabError, LoadError, UnsupportedSiteError, VectorError

_KEY = "vector"


@dataclass
class SteeringVector:
    """A direction in one site's activation space, and where it came from."""

    tensor: torch.Tensor
    site: str = "resid_post"
    layer: int | None = None
    model_id: str | None = None
    metadata: dict = field(default_factory=dict)

    def __post_init__(self):
        self.tensor = as_tensor(self.tensor, what="steering vector")  # numbers only, no NaN/Inf
        if self.tensor.dim() != 1 or self.tensor.numel() == 0:
            raise VectorError(f"a steering vector is 1-D [width], got shape {tuple(self.tensor.shape)}.")
        if not isinstance(self.site, str) or not self.site:
            raise InterplabError(f"a steering vector's site is a site name such as 'resid_post', got {self.site!r}.")
        if self.layer is not None and (isinstance(self.layer, bool) or not isinstance(self.layer, int)):
            raise InterplabError(f"a steering vector's layer is an int or None, got {self.layer!r}.")
        if not isinstance(self.metadata, dict):
            raise InterplabError(f"metadata must be a dict, got {type(self.metadata).__name__}.")

    @property
    def norm(self) -> float:
        return self.tensor.float().norm().item()

    def unit(self) -> SteeringVector:
        n = self.tensor.norm()
        if n == 0:
            raise VectorError("cannot normalise a zero vector.")
        return SteeringVector(self.tensor / n, self.site, self.layer, self.model_id, dict(self.metadata))

    def steer(self, alpha: float = 1.0, **kw) -> Edit:
        """ilab.steer at this vector's site and layer: h + alpha * v."""
        return steer(self.site, self.layer, self.tensor, alpha=alpha, **kw)

    def project(self, coeff: float = 0.0, **kw) -> Edit:
        return project(self.site, self.layer, self.tensor, coeff=coeff, **kw)

    def clamp(self, lo=None, hi=None, **kw) -> Edit:
        return clamp(self.site, self.layer, self.tensor, lo=lo, hi=hi, **kw)


def _acts(engine, prompts, site: str, layer, pos) -> torch.Tensor:
    """[n, width]: one row per prompt at `pos` (int: that position of each prompt), or per real token (pos=None)."""
    if isinstance(prompts, str):
        prompts = [prompts]
    if not hasattr(engine, "run") or not hasattr(engine, "tokenizer"):  # diff_of_means(pos_prompts, neg_prompts)
        raise InterplabError(f"the first argument must be an ilab.Lab, got {type(engine).__name__}: "
                             f"ilab.analyses.vectors.diff_of_means(lab, positive_prompts, negative_prompts, ...).")
    if site == "pattern":  # checked before any run: attention weights have no residual width
        raise UnsupportedSiteError("site 'pattern' holds attention weights [batch, heads, pos, pos]; steering "
                                   "vectors live in [batch, pos, width] sites such as 'resid_post'.")
    if pos is not None and (isinstance(pos, bool) or not isinstance(pos, int)):
        raise InterplabError(f"pos must be an int (-1 = each prompt's last token) or None (every token), got "
                             f"{type(pos).__name__} {pos!r}.")
    run = engine.run(prompts, cache=[(site, layer)], log=False)  # lab.run checks the prompts
    a = run.cache[site, layer]
    if a.dim() != 3:
        raise VectorError(f"site {site!r} gives a {a.dim()}-D activation; vectors need [batch, pos, width].")
    rows = []
    for i, n in enumerate(run.lengths):
        if pos is None:
            rows.append(a[i, :n])
        else:
            if not -n <= pos < n:
                raise InterplabError(f"pos {pos} out of range for prompt {run.prompts[i]!r} ({n} tokens).")
            rows.append(a[i, pos % n][None])
    return torch.cat(rows).float()


def diff_of_means(lab, positive_prompts, negative_prompts, site: str = "resid_post", layer: int = 0,
                  pos: int | None = -1) -> torch.Tensor:
    """mean(activation | positive) - mean(activation | negative) at (site, layer): a [width] tensor.

    pos: an int picks that position of each prompt (-1 = each prompt's last real token); None averages over every
    real token of every prompt."""
    engine = engine_of(lab)
    return _acts(engine, positive_prompts, site, layer, pos).mean(0) - _acts(engine, negative_prompts, site, layer,
                                                                          pos).mean(0)


def from_tensor(tensor, site: str = "resid_post", layer: int | None = None, model_id: str | None = None,
                **metadata) -> SteeringVector:
    """Wrap a tensor as a SteeringVector (site, layer and model id travel with it)."""
    if isinstance(tensor, SteeringVector):
        return tensor
    return SteeringVector(as_tensor(tensor, what="steering vector").cpu(), site, layer, model_id, metadata)


def save(path, vector, metadata: dict | None = None) -> None:
    """Write a vector (tensor or SteeringVector) to a .safetensors file with its metadata (model id, site, layer,
    and any extra JSON-able values)."""
    from safetensors.torch import save_file

    sv = vector if isinstance(vector, SteeringVector) else from_tensor(vector)
    if metadata is not None and not isinstance(metadata, dict):
        raise InterplabError(f"metadata must be a dict of JSON-able values, got {type(metadata).__name__}.")
    folder = os.path.dirname(os.fspath(path)) or "."
    if not os.path.isdir(folder):
        raise InterplabError(f"cannot write {path}: the folder {folder!r} does not exist. Create it first "
                             f"(os.makedirs({folder!r}, exist_ok=True)) or pick another path.")
    meta = {**sv.metadata, **(metadata or {})}
    where = {"model_id": sv.model_id, "site": sv.site, "layer": sv.layer}
    for k in where:
        if k in meta:  # explicit metadata wins
            where[k] = meta.pop(k)
    header = {"format": "interplab.vector/1", **{k: json.dumps(v) for k, v in where.items()},
              "extra": json.dumps(meta, default=str)}
    save_file({_KEY: sv.tensor.detach().cpu().contiguous()}, str(path), metadata=header)


def load(path) -> SteeringVector:
    """Read a vector written by save(): a SteeringVector with its site, layer, model id and metadata."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            header = f.metadata() or {}
            keys = list(f.keys())
            tensor = f.get_tensor(_KEY) if _KEY in keys else None
    except Exception as e:  # noqa: BLE001 - missing file, or not a safetensors file
        raise LoadError(f"could not read a steering vector from {path}: {e}") from e
    if tensor is None:
        raise LoadError(f"{path} holds no {_KEY!r} tensor (it has {keys}): was it written by "
                        f"ilab.analyses.vectors.save?")

    def field_(k, default=None):
        return json.loads(header[k]) if k in header else default

    return SteeringVector(tensor, field_("site", "resid_post"), field_("layer"), field_("model_id"),
                          field_("extra", {}))


__all__ = ["SteeringVector", "diff_of_means", "from_tensor", "save", "load"]
