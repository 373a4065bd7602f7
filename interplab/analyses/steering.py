"""Steering during generation, and edits bound to every call of the plain model.

    out = lab.generate("The capital of France is", [ilab.steer("resid_post", 1, v, alpha=8)], max_new_tokens=16)
    out.text

    with lab.edit([ilab.project("resid_post", 1, u)]):      # every lab.model(...) / lab.model.generate(...)
        text = lab.model.generate(ids, max_new_tokens=8)

The edit constructors of generation (ban_expert, ban_token, force_token) and the scale to size a vector against
(residual_norm). Generation itself, and the hooks of bound edits, run in the engine (interplab.engine.generate).
"""

from __future__ import annotations

import operator

import torch

from ..edits import Edit
from ..engine import engine_of
from ..engine import generate as gen
from ..engine.generate import Generation, SamplerEdit
from ..errors import OutOfRangeError, UnsupportedSiteError

DEFAULT_NORM_PROMPTS = [
    "The capital of France is Paris.",
    "When Mary and John went to the store, John gave a drink to Mary.",
    "After the party, Alice gave a book to Bob.",
]


# ---- edit constructors specific to generation ---------------------------------------------------------------

def ban_expert(layer, expert, pos=None, steps=None, site: str = "router", **kw) -> Edit:
    """Set the router logit of `expert` (int or list) to -inf at `layer` of a mixture-of-experts model, so no token
    is routed to it (each token's next-best expert takes its place). site: 'router' (found on the layer), or a raw
    module path such as 'model.layers.{layer}.mlp.gate'."""
    experts = list(expert) if isinstance(expert, (list, tuple, range)) else [expert]
    experts = [_as_index(e) for e in experts]  # numpy / torch ints are indices too; anything else: Edit says why
    meta = {**kw.pop("meta", {}), "experts": experts}
    return Edit("ban_expert", site, layer, pos, steps=steps, meta=meta, **kw)


def _as_index(x):
    try:
        return x if isinstance(x, bool) else operator.index(x)
    except TypeError:
        return x


def ban_token(token) -> SamplerEdit:
    """Never sample `token` (a single-token string or an id): its logit is -inf at every step."""
    return SamplerEdit("ban", token)


def force_token(token, step: int) -> SamplerEdit:
    """Make the token drawn at `step` (0 = the first new token) be `token`; later steps continue from it."""
    if not isinstance(step, int) or step < 0:
        raise OutOfRangeError(f"force_token step must be an int >= 0 (0 = the first new token), got {step!r}.")
    return SamplerEdit("force", token, step)


# ---- sizing vectors --------------------------------------------------------------------------------------------

def generate(lab, prompt, edits=None, **kw) -> Generation:
    """Generate on the Hugging Face model with `edits` active at every decoding step (interplab.engine.generate.
    generate, whose arguments these are); lab.generate also chooses the backend (vLLM when the lab has one)."""
    return gen.generate(engine_of(lab), prompt, edits, **kw)


def bind_hooks(lab, edits: list):
    """Attach `edits` to every call of the plain model and return the HookManager holding their hooks
    (interplab.engine.generate.bind_hooks); Lab.bind / Lab.edit keep what is bound."""
    return gen.bind_hooks(engine_of(lab), edits)


def residual_norm(lab, site: str = "resid_post", layer: int = 0, prompts=None) -> float:
    """Mean L2 norm of the activation at (site, layer) over every real token of `prompts`: the scale to size a
    steering vector against (alpha = 4 * norm is a strong steer)."""
    engine = engine_of(lab)
    prompts = DEFAULT_NORM_PROMPTS if prompts is None else prompts
    if site == "pattern":  # attention weights, [batch, heads, pos, pos]: no width to measure a norm along
        raise UnsupportedSiteError("residual_norm reads an activation [batch, pos, width]; 'pattern' holds attention "
                                   "weights. Use 'resid_post', 'resid_pre', 'attn_out' or 'mlp_out'.")
    run = engine.run(prompts, cache=[(site, layer)], log=False)
    acts = run.cache[site, layer]
    if acts.dim() != 3:
        raise UnsupportedSiteError(f"residual_norm: site {site!r} gives a {acts.dim()}-D activation "
                                   f"{tuple(acts.shape)}; it needs [batch, pos, width], e.g. 'resid_post'.")
    norms = [acts[i, :n].float().norm(dim=-1) for i, n in enumerate(run.lengths)]
    return torch.cat(norms).mean().item()



__all__ = ["generate", "residual_norm", "bind_hooks", "ban_expert", "ban_token", "force_token"]
