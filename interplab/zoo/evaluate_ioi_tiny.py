"""Measure ``ioi-tiny`` with plain PyTorch forward hooks, independent of the rest of interplab.

    python -m interplab.zoo.evaluate_ioi_tiny                 # print the figures (markdown)
    python -m interplab.zoo.evaluate_ioi_tiny --write-card    # also rewrite interplab/zoo/ioi_tiny/MODEL_CARD.md

Patching is *denoising*: run the corrupt prompt (S2 replaced by the IO name, so its answer flips) and copy one
activation from the clean run. Metric: logit(answer) - logit(wrong) at the final position, where answer/wrong are
the clean prompt's IO and S. Normalised score = (mean patched - mean corrupt) / (mean clean - mean corrupt), means
taken over the dataset (1 = clean behaviour restored, 0 = corrupt behaviour).

Sites: ``resid_pre`` L = input of block L (``transformer.h[L]``); ``z`` head h of layer L = columns
h*d_head:(h+1)*d_head of the input of ``transformer.h[L].attn.c_proj``.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).parent
MODEL_DIR = HERE / "ioi_tiny"


# ---------------------------------------------------------------------------------------------- basics
def load(path=MODEL_DIR):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager")
    model.eval()
    return model, AutoTokenizer.from_pretrained(path)


def _encode(tok, prompts):
    import torch

    ids = [tok.encode(p) for p in prompts]
    n = max(len(i) for i in ids)
    x = torch.full((len(ids), n), tok.pad_token_id)
    mask = torch.zeros((len(ids), n), dtype=torch.long)
    for r, i in enumerate(ids):
        x[r, : len(i)] = torch.tensor(i)
        mask[r, : len(i)] = 1
    return x, mask, torch.tensor([len(i) - 1 for i in ids])


def score(model, tok, dataset, batch=100):
    """(accuracy, mean logit diff): accuracy = share of clean prompts where logit(answer) > logit(wrong)."""
    ld = logit_diffs(model, tok, dataset, batch)
    return (ld > 0).float().mean().item(), ld.mean().item()


def logit_diffs(model, tok, dataset, batch=100, key="clean"):
    import torch

    lds = []
    with torch.no_grad():
        for s in range(0, len(dataset), batch):
            rows = dataset[s : s + batch]
            x, mask, last = _encode(tok, [r[key] for r in rows])
            fin = model(input_ids=x, attention_mask=mask).logits[torch.arange(len(rows)), last]
            a = torch.tensor([tok.encode(r["answer"])[0] for r in rows])
            w = torch.tensor([tok.encode(r["wrong"])[0] for r in rows])
            lds.append(fin.gather(1, a[:, None])[:, 0] - fin.gather(1, w[:, None])[:, 0])
    return torch.cat(lds)


def top1_accuracy(model, tok, dataset):
    """Share of clean prompts whose arg-max next token (over the whole vocabulary) is the answer."""
    import torch

    hits = 0
    with torch.no_grad():
        x, mask, last = _encode(tok, [r["clean"] for r in dataset])
        fin = model(input_ids=x, attention_mask=mask).logits[torch.arange(len(dataset)), last]
        a = torch.tensor([tok.encode(r["answer"])[0] for r in dataset])
        hits = (fin.argmax(-1) == a).sum().item()
    return hits / len(dataset)


# ---------------------------------------------------------------------------------------------- patching
class Groups:
    """The dataset tokenized and grouped by length (clean and corrupt have equal length), with named positions."""

    def __init__(self, tok, dataset):
        import torch

        by_len = defaultdict(list)
        for r in dataset:
            c, k = tok.encode(r["clean"]), tok.encode(r["corrupt"])
            if len(c) != len(k):
                raise ValueError(f"clean/corrupt lengths differ: {r}")
            by_len[len(c)].append((r, c, k))
        self.groups = []
        for n, items in sorted(by_len.items()):
            clean = torch.tensor([c for _, c, _ in items])
            corrupt = torch.tensor([k for _, _, k in items])
            ans = torch.tensor([tok.encode(r["answer"])[0] for r, _, _ in items])
            wrong = torch.tensor([tok.encode(r["wrong"])[0] for r, _, _ in items])
            s2 = (clean != corrupt).float().argmax(1)  # first differing position = S2
            io = (clean == ans[:, None]).float().argmax(1)
            s1 = (clean == wrong[:, None]).float().argmax(1)
            self.groups.append(dict(clean=clean, corrupt=corrupt, ans=ans, wrong=wrong, n=n,
                                    pos={"IO": io, "S1": s1, "S2": s2, "S2+1": s2 + 1,
                                         "END": torch.full_like(s2, n - 1)}))
        self.size = sum(len(g["ans"]) for g in self.groups)


def _ld(logits, g):
    import torch

    fin = logits[:, -1]
    r = torch.arange(len(fin))
    return fin[r, g["ans"]] - fin[r, g["wrong"]]


def _run(model, x, hooks):
    """Forward with (module, pre_hook_fn) pairs attached; hooks are removed afterwards, even on error."""
    import torch

    handles = [m.register_forward_pre_hook(fn, with_kwargs=True) for m, fn in hooks]
    try:
        with torch.no_grad():
            return model(input_ids=x).logits
    finally:
        for h in handles:
            h.remove()


def _site_module(model, site, layer):
    blocks = model.transformer.h
    if site == "resid_pre":
        return blocks[layer]
    if site == "z":
        return blocks[layer].attn.c_proj
    raise ValueError(site)


def _first_tensor(args, kwargs):
    if args:
        return args[0], True
    return kwargs["hidden_states"], False


def _cache(model, x, sites):
    """Clean activations at the given (site, layer) inputs."""
    store = {}

    def make(key):
        def fn(mod, args, kwargs):
            store[key] = _first_tensor(args, kwargs)[0].detach().clone()

        return fn

    logits = _run(model, x, [(_site_module(model, s, l), make((s, l))) for s, l in sites])
    return logits, store


def _patch_hook(source, rows_pos, cols):
    """Pre-hook that copies ``source`` into the input at positions rows_pos (None = all; else LongTensor [b]) and
    columns ``cols`` (a slice)."""
    import torch

    def fn(mod, args, kwargs):
        h, positional = _first_tensor(args, kwargs)
        h = h.clone()
        if rows_pos is None:
            h[:, :, cols] = source[:, :, cols]
        else:
            r = torch.arange(h.shape[0])
            h[r, rows_pos, cols] = source[r, rows_pos, cols]
        if positional:
            return (h,) + tuple(args[1:]), kwargs
        kwargs = dict(kwargs)
        kwargs["hidden_states"] = h
        return args, kwargs

    return fn


def patch_experiments(model, tok, dataset, full_positions=False):
    """All denoising patching figures on ``dataset``. Returns a dict of plain lists (JSON-able).

    resid_pre_named[L][name]: resid_pre L patched at a named position (IO, S1, S2, S2+1, END);
    z_all[L][h] / z_end[L][h] / z_s2[L][h]: head h of layer L patched at all positions / final / S2 position.
    """
    cfg = model.config
    L, H = cfg.n_layer, cfg.n_head
    dh = cfg.n_embd // H
    gs = Groups(tok, dataset)
    names = ["IO", "S1", "S2", "S2+1", "END"]
    sums = defaultdict(float)
    sites = [("resid_pre", l) for l in range(L)] + [("z", l) for l in range(L)]
    for g in gs.groups:
        clean_logits, cache = _cache(model, g["clean"], sites)
        corrupt_logits = _run(model, g["corrupt"], [])
        sums["clean"] += _ld(clean_logits, g).sum().item()
        sums["corrupt"] += _ld(corrupt_logits, g).sum().item()
        for l in range(L):
            m = _site_module(model, "resid_pre", l)
            for name in names:
                fn = _patch_hook(cache[("resid_pre", l)], g["pos"][name], slice(None))
                sums[("resid", l, name)] += _ld(_run(model, g["corrupt"], [(m, fn)]), g).sum().item()
            mz = _site_module(model, "z", l)
            for h in range(H):
                cols = slice(h * dh, (h + 1) * dh)
                for where, pos in (("all", None), ("end", g["pos"]["END"]), ("s2", g["pos"]["S2"])):
                    fn = _patch_hook(cache[("z", l)], pos, cols)
                    sums[("z", where, l, h)] += _ld(_run(model, g["corrupt"], [(mz, fn)]), g).sum().item()
    n = gs.size
    clean, corrupt = sums["clean"] / n, sums["corrupt"] / n

    def norm(v):
        return (v / n - corrupt) / (clean - corrupt)

    res = {
        "n_prompts": n, "clean_logit_diff": clean, "corrupt_logit_diff": corrupt,
        "resid_pre_named": [{name: norm(sums[("resid", l, name)]) for name in names} for l in range(L)],
        "z_all": [[norm(sums[("z", "all", l, h)]) for h in range(H)] for l in range(L)],
        "z_end": [[norm(sums[("z", "end", l, h)]) for h in range(H)] for l in range(L)],
        "z_s2": [[norm(sums[("z", "s2", l, h)]) for h in range(H)] for l in range(L)],
    }
    return res


def resid_grid(model, tok, dataset):
    """resid_pre layer x position table on a dataset whose prompts all have the same token length.
    Returns (token labels of the first prompt, values[L][pos])."""
    gs = Groups(tok, dataset)
    if len(gs.groups) != 1:
        raise ValueError("resid_grid needs prompts of one token length")
    g = gs.groups[0]
    L = model.config.n_layer
    clean_logits, cache = _cache(model, g["clean"], [("resid_pre", l) for l in range(L)])
    clean = _ld(clean_logits, g).mean().item()
    corrupt = _ld(_run(model, g["corrupt"], []), g).mean().item()
    import torch

    vals = []
    for l in range(L):
        row = []
        for p in range(g["n"]):
            pos = torch.full((len(g["ans"]),), p)
            fn = _patch_hook(cache[("resid_pre", l)], pos, slice(None))
            v = _ld(_run(model, g["corrupt"], [(_site_module(model, "resid_pre", l), fn)]), g).mean().item()
            row.append((v - corrupt) / (clean - corrupt))
        vals.append(row)
    labels = [tok.decode([t]) for t in g["clean"][0].tolist()]
    return labels, vals


def attention_summary(model, tok, dataset):
    """Mean attention probability, per head, from END to IO/S1/S2/bystander-or-other and from S2 to S1 and to IO
    (clean prompts; eager attention weights from ``output_attentions``). "S2->S1 ABBA" / "S2->S1 BABA": S2 -> S1 over
    the prompts whose intro names IO first (S1 second) / S first only ("S2->IO ABBA" / "BABA" likewise): a head that
    looks at the earlier copy of the name (duplicate-token) is high in both, a head that looks at one intro
    *position* in one of them only."""
    import torch

    gs = Groups(tok, dataset)
    L, H = model.config.n_layer, model.config.n_head
    keys = ["END->IO", "END->S1", "END->S2", "END->END", "S2->S1", "S2->IO", "S2->S2"]
    split = [f"{k} {o}" for k in ("S2->S1", "S2->IO") for o in ("ABBA", "BABA")]
    acc = {k: torch.zeros(L, H) for k in keys + split}
    count = {"ABBA": 0, "BABA": 0}
    for g in gs.groups:
        with torch.no_grad():
            att = model(input_ids=g["clean"], output_attentions=True).attentions  # L x [b, H, q, k]
        r = torch.arange(len(g["ans"]))
        p = g["pos"]
        order = {"ABBA": p["IO"] < p["S1"], "BABA": p["S1"] < p["IO"]}
        for o, mask in order.items():
            count[o] += int(mask.sum())
        for l in range(L):
            a = att[l]
            for k in keys:
                q, kk = k.split("->")
                acc[k][l] += a[r, :, p[q], p[kk]].sum(0)
            for o, mask in order.items():
                for kk in ("S1", "IO"):
                    acc[f"S2->{kk} {o}"][l] += a[r, :, p["S2"], p[kk]][mask].sum(0)
    out = {k: (acc[k] / gs.size).tolist() for k in keys}
    out.update({k: (acc[k] / max(count[k.split()[1]], 1)).tolist() for k in split})
    return out


def fixed_template_dataset(n, seed=0):
    """Held-out pairs in one held-out template with a bystander after S2 (all prompts one token length)."""
    import random

    from interplab.zoo import corpus

    rng = random.Random(f"fixed-{seed}")
    out = []
    for _ in range(n):
        a, b = corpus._sample_pair(rng, True)
        io, s = (a, b) if rng.random() < 0.5 else (b, a)
        c = rng.choice([x for x in corpus.NAMES if x not in (a, b)])
        o = rng.choice(corpus.OBJECTS)
        place = rng.choice(corpus.PLACES)
        t = "When {A} and {B} visited the {place}, then {S}, who had talked to {C} before, lent the {o} to"
        out.append({"clean": t.format(A=a, B=b, place=place, S=s, C=c, o=o),
                    "corrupt": t.format(A=a, B=b, place=place, S=io, C=c, o=o),
                    "answer": " " + io, "wrong": " " + s})
    return out


# ---------------------------------------------------------------------------------------------- held-out phrasings
# IOI phrasings that neither corpus (corpus_repeated_name.py, corpus.py) produces (tests/test_zoo.py checks that no
# training document matches any of them): new openers ("Then,", "Yesterday", "Afterwards,"), intros ("had a long
# talk", "arrived,", "were sitting in", "ran into", "stayed at", "Both ... liked", "sat down in", "came in"), S2 slots
# and verbs ("said to", "smiled at", "waved to", "gave it to"). The first four are the phrasings of issue 15.
# {S} is S2 (the repeated candidate), {C} a bystander.
HELDOUT_FAMILIES = {
    "then_period": "Then, {A} and {B} went to the {place}. {S} gave a {obj} to",
    "yesterday_period": "Yesterday {A} and {B} went to the {place}. {S} gave a {obj} to",
    "afterwards_talk": "Afterwards, {A} and {B} had a long talk. {S} said to",
    "when_arrived": "When {A} and {B} arrived, {S} smiled at",
    "sitting_and": "{A} and {B} were sitting in the {place}, and {S} passed the {obj} to",
    "ran_into_later": "At the {place}, {A} ran into {B}. Later that day {S} sent a {obj} to",
    "stayed_so": "{A} stayed at the {place} with {B}, so {S} bought a {obj} for",
    "both_liked_but": "Both {A} and {B} liked the {obj}, but in the end {S} gave it to",
    "bystander_asked": "After dinner {A} and {B} sat down in the {place}. {C} asked {S} to hand the {obj} to",
    "came_in_minute": "The {place} was quiet when {A} and {B} came in. After a minute {S} waved to",
}

# A second set, written during issue 15's work as a stand-in for phrasings that others will try: the corpus was
# changed with these in view but never given them (tests/test_zoo.py checks that no training document matches one).
# The card reports them without a goal.
LATER_FAMILIES = {
    "friday_cooked": "On Friday {A} and {B} cooked dinner together. Afterwards {S} handed a {obj} to",
    "walking_home": "While {A} and {B} were walking home, {S} gave a {obj} to",
    "were_friends": "{A} and {B} were friends. {S} wrote a letter to",
    "found_gave": "At the {place}, {A} and {B} found a {obj}. {S} gave it to",
    "semicolon": "{A} met {B} at the {place}; {S} handed the {obj} to",
    "after_school": "After school, {A} played with {B} in the {place}. Then {S} threw the {obj} to",
    "rain": "It rained all day, so {A} and {B} stayed inside. In the evening {S} read a story to",
    "on_sunday": "On Sunday {A} and {B} went to the {place}. {S} gave a {obj} to",
    "there": "{A} and {B} went to the {place} together. There, {S} handed a {obj} to",
    "suddenly": "{A} was with {B} at the {place}. Suddenly {S} threw a {obj} to",
    "after_game": "After the game, {A} and {B} went home. {S} said goodbye to",
    "in_place": "In the {place}, {A} talked with {B}. Then {S} gave the {obj} to",
    "dinner_paid": "{A} and {B} had dinner at the {place}. Later {S} paid for",
    "last_week": "Last week {A} and {B} visited a friend. {S} brought a {obj} to",
}
ALL_FAMILIES = {**HELDOUT_FAMILIES, **LATER_FAMILIES}
# prompts per family in the card and the goal test: at 40, a family's mean logit diff moved by about 0.5 from one
# sample of name pairs to another, enough to turn a family near the goal's edge from met to missed
FAMILY_PROMPTS = 200
OTHER_SAMPLE_SEEDS = (1, 2, 3)  # the card's check of the goal families on other samples (the card's own: seed 0)


def family_dataset(family, n=FAMILY_PROMPTS, seed=0):
    """``n`` clean/corrupt pairs of one held-out phrasing family (of either set): held-out name pairs, both name
    orders (S first or second in the intro), random place/object/bystander; corrupt = S2 replaced by the IO."""
    import random

    from interplab.zoo import corpus

    template = ALL_FAMILIES[family]
    rng = random.Random(f"family-{family}-{seed}")
    out = []
    for _ in range(n):
        a, b = corpus._sample_pair(rng, True)
        io, s = (a, b) if rng.random() < 0.5 else (b, a)
        c = rng.choice([x for x in corpus.NAMES if x not in (a, b)])
        fill = dict(A=a, B=b, C=c, place=rng.choice(corpus.PLACES), obj=rng.choice(corpus.OBJECTS))
        out.append({"clean": template.format(S=s, **fill), "corrupt": template.format(S=io, **fill),
                    "answer": " " + io, "wrong": " " + s})
    return out


def family_regex(family):
    """A regex matching any text that starts with an instance of the family (names, places, objects: any word)."""
    import re

    parts = re.split(r"(\{[A-Za-z]+\})", ALL_FAMILIES[family])
    return re.compile("^" + "".join(r"\w+" if p.startswith("{") else re.escape(p) for p in parts))


def family_scores(model, tok, n=FAMILY_PROMPTS, seed=0, families=HELDOUT_FAMILIES):
    """{family: {"top1", "accuracy", "logit_diff"}} on ``family_dataset(family, n, seed)`` for each of ``families``."""
    out = {}
    for fam in families:
        ds = family_dataset(fam, n, seed)
        acc, ld = score(model, tok, ds)
        out[fam] = {"top1": top1_accuracy(model, tok, ds), "accuracy": acc, "logit_diff": ld}
    return out


# ---------------------------------------------------------------------------------------------- report
def _table(header, rows, fmt="{:+.2f}"):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for label, vals in rows:
        lines.append("| " + " | ".join([label] + [fmt.format(v) if isinstance(v, float) else str(v)
                                                  for v in vals]) + " |")
    return "\n".join(lines)


def evaluate(path=MODEL_DIR, n=200, seed=0, corpus_name=None):
    """Everything the card reports, as a dict. ``corpus_name``: whose ``ioi_dataset`` gives the splits and the
    patching prompts ("classic" or "repeated-name"); None = the one named in training_info.json, else classic."""
    import torch

    from interplab.zoo import corpus as classic
    from interplab.zoo import corpus_repeated_name

    info = Path(path) / "training_info.json"
    training = json.loads(info.read_text()) if info.exists() else None
    if corpus_name is None:
        corpus_name = ((training or {}).get("args") or {}).get("corpus", "classic")
    corpus = {"classic": classic, "repeated-name": corpus_repeated_name}[corpus_name]
    torch.manual_seed(0)
    model, tok = load(path)
    out = {"splits": {}}
    for split in ("train", "test_pairs", "test_templates", "test"):
        ds = corpus.ioi_dataset(n, split, seed=seed)
        acc, ld = score(model, tok, ds)
        out["splits"][split] = {"accuracy": acc, "logit_diff": ld, "top1": top1_accuracy(model, tok, ds)}
    out["families"] = family_scores(model, tok, seed=seed)
    out["later_families"] = family_scores(model, tok, seed=seed, families=LATER_FAMILIES)
    # the goal families again on other name pairs, objects and places: how far the figures above are the sample's
    out["families_other_samples"] = {other: family_scores(model, tok, seed=other) for other in OTHER_SAMPLE_SEEDS}
    ds = corpus.ioi_dataset(n, "test", seed=seed)
    out["patching"] = patch_experiments(model, tok, ds)
    out["attention"] = attention_summary(model, tok, ds)
    fixed = fixed_template_dataset(min(n, 100), seed)
    labels, grid = resid_grid(model, tok, fixed)
    out["resid_grid"] = {"labels": labels, "values": grid, "example": fixed[0]}
    out["n_params"] = sum(p.numel() for p in model.parameters())
    out["files_bytes"] = {p.name: p.stat().st_size for p in sorted(Path(path).iterdir()) if p.is_file()}
    out["training"] = training
    out["corpus"] = corpus_name
    return out


def report(res) -> str:
    L = len(res["patching"]["z_all"])
    H = len(res["patching"]["z_all"][0])
    s = []
    s.append("### Held-out behaviour\n")
    s.append(_table(["split", "accuracy (IO > S)", "mean logit diff IO - S", "top-1 = IO"],
                    [(k, [v["accuracy"], v["logit_diff"], v["top1"]]) for k, v in res["splits"].items()],
                    fmt="{:.3f}"))
    s.append(f"\n\n### Held-out phrasings (never produced by the corpus generator; {FAMILY_PROMPTS} prompts each, "
             "held-out name pairs, both name orders)\n")
    fam = res["families"]
    s.append(_table(["family", "template", "top-1 = IO", "accuracy (IO > S)", "mean logit diff IO - S"],
                    [(k, ["`" + HELDOUT_FAMILIES[k] + "`", v["top1"], v["accuracy"], v["logit_diff"]])
                     for k, v in fam.items()],
                    fmt="{:.3f}"))
    later = res.get("later_families")
    if later:
        s.append("\n\n### A second set of phrasings, written while the corpus was changed, never in it (no goal; "
                 f"{FAMILY_PROMPTS} prompts each)\n")
        s.append(_table(["family", "template", "top-1 = IO", "accuracy (IO > S)", "mean logit diff IO - S"],
                        [(k, ["`" + LATER_FAMILIES[k] + "`", v["top1"], v["accuracy"], v["logit_diff"]])
                         for k, v in later.items()],
                        fmt="{:.3f}"))
    p = res["patching"]
    s.append(f"\n\nPatching dataset: `ioi_dataset({p['n_prompts']}, 'test')` (held-out pairs and templates). "
             f"Mean logit diff clean {p['clean_logit_diff']:+.2f}, corrupt {p['corrupt_logit_diff']:+.2f}. "
             "Values are normalised denoising scores (1 = clean restored, 0 = corrupt).\n")
    s.append("\n### resid_pre patched at one named position (rows: layer)\n")
    names = list(p["resid_pre_named"][0])
    s.append(_table(["layer"] + names, [(f"resid_pre {l}", [p["resid_pre_named"][l][k] for k in names])
                                        for l in range(L)]))
    for key, title in (("z_all", "all positions"), ("z_end", "the final position only"),
                       ("z_s2", "the S2 position only")):
        s.append(f"\n\n### z per head, patched at {title} (rows: layer, columns: head)\n")
        s.append(_table(["layer"] + [f"H{h}" for h in range(H)], [(f"L{l}", p[key][l]) for l in range(L)]))
    a = res["attention"]
    s.append("\n\n### Attention (clean prompts, mean probability)\n")
    keys = list(a)
    s.append(_table(["head"] + keys, [(f"L{l}H{h}", [a[k][l][h] for k in keys]) for l in range(L)
                                      for h in range(H)], fmt="{:.2f}"))
    g = res["resid_grid"]
    s.append(f"\n\n### resid_pre layer x position, one held-out template with a bystander after S2\n\n"
             f"Example clean: `{g['example']['clean']}`; corrupt: `{g['example']['corrupt']}`.\n\n")
    labels = [repr(t)[1:-1].replace("|", "\\|") for t in g["labels"]]
    s.append(_table(["layer"] + [f"{i}:`{t}`" for i, t in enumerate(labels)],
                    [(f"resid_pre {l}", g["values"][l]) for l in range(L)]))
    s.append("\n")
    return "\n".join(s)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(MODEL_DIR))
    ap.add_argument("-n", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--corpus", choices=["classic", "repeated-name"], default=None,
                    help="generator of the split and patching prompts (default: the model's training corpus)")
    ap.add_argument("--json", help="also write the raw figures to this JSON file")
    ap.add_argument("--write-card", action="store_true", help="rewrite MODEL_CARD.md in the model folder")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    t0 = time.time()
    res = evaluate(args.model, args.n, corpus_name=args.corpus)
    text = report(res)
    print(text)
    print(f"(evaluated in {time.time() - t0:.0f}s)")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    if args.write_card:
        from interplab.zoo.model_card import render

        (Path(args.model) / "MODEL_CARD.md").write_text(render(res, text))


if __name__ == "__main__":
    main()
