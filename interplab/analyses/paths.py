"""Path patching (Wang et al. 2022, "Interpretability in the Wild"): a sender's effect through chosen receivers only.

For each sender (a head, or an MLP) and the receivers (the logits, or the queries / keys / values of chosen heads):

1. run the base prompt with the sender's output taken from the source run and every other head's output frozen
   at its base value (MLPs are recomputed, as in the paper): what changes downstream is the sender's path alone;
2. receivers = the logits: the metric of that run. Receivers = q/k/v of heads: record their q/k/v in that run,
   then run the base prompt once more with only those receivers' q/k/v patched in, and take the metric.

Senders are batched: one row per sender (and prompt pair) in each forward, chunks of at most `max_batch` rows.
Values are normalised like sweeps: 1 = the source run's metric, 0 = the base run's. A sender in a receiver's own
layer or after it has no path into it: its value there is NaN (not answered), and a sender named in a list that
reaches no receiver at all is refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .. import edits as ed
from ..engine import Engine, engine_of
from ..errors import InterplabError

RECEIVER_SITES = ("q", "k", "v")


@dataclass
class PathPatchResult:
    values: torch.Tensor  # [receiver groups, layers, heads (+1 for the MLP column when senders include MLPs)]
    raw: torch.Tensor  # the metric itself, same shape
    senders: list[tuple[int, int | None]]  # (layer, head), head None = that layer's MLP
    receivers: list[list[tuple[int, int, str]] | str]  # per group: "logits" or [(layer, head, "q"|"k"|"v"), ...]
    metric_name: str
    direction: str
    clean_value: float
    corrupt_value: float
    labels: dict = field(default_factory=dict)

    def value(self, layer: int, head: int | None, group: int = 0) -> float:
        """The normalised effect of one sender (head None = the layer's MLP) through one receiver group."""
        col = self.labels["cols"].index(head if head is not None else "MLP")
        return float(self.values[group, layer, col])

    def show(self):
        """Senders as a heatmap; a click on one shows its effect through each receiver (None without widgets)."""
        from .. import display

        return display.view(self)


def path_patch(lab: Engine, clean, corrupt, metric, senders="heads", receivers="logits", direction: str = "noise",
               per_receiver: bool = False, max_batch: int = 64) -> PathPatchResult:
    """Path patching of every sender through `receivers` (see the module docstring).

    senders: "heads" (every head), "heads+mlps", or a list of (layer, head) with head None for an MLP.
    receivers: "logits", or a list of (layer, head, "q" | "k" | "v"), patched together; per_receiver=True
    measures each receiver on its own instead (one group each). direction: "noise" (the paper's: the corrupt run's
    sender into the clean run) or "denoise"."""
    engine = engine_of(lab)
    if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
        raise InterplabError(f"max_batch={max_batch!r}: the most rows per forward, an int >= 1.")
    if engine.sites.arch is None:
        raise InterplabError("path_patch needs a known architecture (see ilab.sites.ARCHS).")
    base, source, metric = engine.paired(clean, corrupt, metric, direction, "path patching")
    sender_list = _senders(engine, senders)
    groups = _receiver_groups(engine, receivers, per_receiver)
    if not isinstance(senders, str):  # senders the user named: each must be able to reach some receiver
        stuck = [s for s in sender_list if not any(_reaches(s[0], g) for g in groups)]
        if stuck:
            first = min(layer for g in groups for layer, _, _ in g)
            raise InterplabError(
                f"sender(s) {', '.join(_name(s) for s in stuck)} cannot reach the receivers: a path runs from an "
                f"earlier layer into a later one, and the earliest receiver is in layer {first} (a sender in the "
                f"receiver's own layer runs beside it, not before it). Choose senders in layers 0..{first - 1}, "
                f"or later receivers.")
    n_pairs = len(base)
    pair_idx = torch.arange(n_pairs)
    frozen_sites = [("z", layer) for layer in range(engine.n_layers)]
    mlp_sites = [("mlp_out", layer) for layer, head in sender_list if head is None]
    base_run = engine.run(base, cache=frozen_sites + mlp_sites, log=False)
    source_run = engine.run(source, cache=frozen_sites + mlp_sites, log=False)
    base_value = float(metric(base_run.last_logits.float(), pair_idx).mean())
    source_value = float(metric(source_run.last_logits.float(), pair_idx).mean())
    if abs(source_value - base_value) < 1e-6:
        raise InterplabError(f"clean and corrupt give the same {metric.name} ({base_value:.4f}): there is no effect "
                             f"to trace. Pick a corrupt prompt that changes the answer.")
    cols = list(range(engine.n_heads)) + (["MLP"] if any(h is None for _, h in sender_list) else [])
    raw = torch.full((len(groups), engine.n_layers, len(cols)), float("nan"))
    per_chunk = max(1, max_batch // n_pairs)
    for start in range(0, len(sender_list), per_chunk):
        chunk = sender_list[start:start + per_chunk]
        values = _run_chunk(engine, chunk, groups, base, base_run, source_run, metric, n_pairs)
        for (layer, head), v in zip(chunk, values.T):
            raw[:, layer, cols.index(head if head is not None else "MLP")] = v
    for gi, group in enumerate(groups):  # no path from a sender at or after every receiver: not answered, not 0
        for layer, head in sender_list:
            if not _reaches(layer, group):
                raw[gi, layer, cols.index(head if head is not None else "MLP")] = float("nan")
    values = (raw - base_value) / (source_value - base_value)
    clean_value, corrupt_value = (base_value, source_value) if direction == "noise" else (source_value, base_value)
    return PathPatchResult(values, raw, sender_list, [g if g == "logits" else list(g) for g in groups], metric.name,
                           direction, clean_value, corrupt_value,
                           {"cols": cols, "layers": list(range(engine.n_layers))})


def _run_chunk(engine: Engine, chunk, groups, base, base_run, source_run, metric, n_pairs: int) -> torch.Tensor:
    """[groups, senders in chunk] metric values: one forward with the senders patched and every other head frozen,
    then (q/k/v receivers) one forward per group with the receivers patched in."""
    prompts = [p for _ in chunk for p in base]  # sender-major: row s * n_pairs + i = sender s, pair i
    edits = []
    for layer in range(engine.n_layers):  # every head's output frozen at its base value, the sender's from the source
        frozen = base_run.cache["z", layer].repeat(len(chunk), 1, 1)
        z = frozen.view(*frozen.shape[:2], engine.n_heads, -1).clone()
        src = source_run.cache["z", layer].view(n_pairs, *z.shape[1:])
        for s, (sl, sh) in enumerate(chunk):
            if sl == layer and sh is not None:
                z[s * n_pairs:(s + 1) * n_pairs, :, sh] = src[:, :, sh]
        edits.append(ed.patch("z", layer, source=z.view_as(frozen)))
    for s, (sl, sh) in enumerate(chunk):
        if sh is None:  # an MLP sender: its output from the source run, in its rows
            edits.append(ed.patch("mlp_out", sl, batch=list(range(s * n_pairs, (s + 1) * n_pairs)),
                                  source=source_run.cache["mlp_out", sl].repeat(len(chunk), 1, 1)))
    receiver_sites = sorted({(site, layer) for g in groups if g != "logits" for layer, _, site in g})
    # (memo=False: these runs' edits are tensors made here; digesting them for a key would copy each to the host)
    sent = engine.run(prompts, edits=edits, cache=receiver_sites, log=False, memo=False)
    pair_idx = torch.arange(n_pairs).repeat(len(chunk))
    out = torch.zeros(len(groups), len(chunk))
    for gi, group in enumerate(groups):
        if group == "logits":
            logits = sent.last_logits
        else:
            patches = [ed.patch(site, layer, head=head, source=sent) for layer, head, site in group]
            logits = engine.run(prompts, edits=patches, log=False, memo=False).last_logits
        out[gi] = metric(logits.float(), pair_idx).view(len(chunk), n_pairs).mean(1)
    return out


def _reaches(layer: int, group) -> bool:
    """Whether a sender in `layer` can reach a receiver group: the logits, or a receiver in a later layer."""
    return group == "logits" or any(layer < receiver_layer for receiver_layer, _, _ in group)


def _name(sender) -> str:
    layer, head = sender
    return f"MLP{layer}" if head is None else f"L{layer}H{head}"


def _senders(engine: Engine, senders) -> list[tuple[int, int | None]]:
    heads = [(layer, h) for layer in range(engine.n_layers) for h in range(engine.n_heads)]
    if senders == "heads":
        return heads
    if senders == "heads+mlps":
        return heads + [(layer, None) for layer in range(engine.n_layers)]
    if not isinstance(senders, (list, tuple)) or not senders:
        raise InterplabError(f"senders={senders!r}: use 'heads', 'heads+mlps', or a list of (layer, head) pairs "
                             f"(head None for that layer's MLP).")
    out = []
    for item in senders:
        if not (isinstance(item, (list, tuple)) and len(item) == 2):
            raise InterplabError(f"sender {item!r}: give (layer, head), or (layer, None) for an MLP.")
        layer, head = item
        layer = engine.sites.layer_index(layer)
        if head is not None:
            engine.sites.check_head(head)
        out.append((layer, head))
    return out


def _receiver_groups(engine: Engine, receivers, per_receiver: bool) -> list:
    if receivers == "logits":
        return ["logits"]
    if not isinstance(receivers, (list, tuple)) or not receivers:
        raise InterplabError(f"receivers={receivers!r}: use 'logits', or a list of (layer, head, 'q' | 'k' | 'v').")
    items = []
    for item in receivers:
        if not (isinstance(item, (list, tuple)) and len(item) == 3 and item[2] in RECEIVER_SITES):
            raise InterplabError(f"receiver {item!r}: give (layer, head, 'q' | 'k' | 'v'), e.g. (3, 1, 'q').")
        layer, head, site = item
        layer = engine.sites.layer_index(layer)
        engine.sites.check_head(head, engine.resolve(site, layer).n_heads)
        items.append((layer, head, site))
    return [[r] for r in items] if per_receiver else [items]
