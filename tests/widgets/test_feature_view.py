"""The feature view (interplab.views.features) and a click on a feature sweep's heatmap: the numbers it shows against
the SAE computed by hand on ioi-tiny's own block output (a hook written here, tests/features/_saes.py's formulas),
bad requests answered and nothing left attached; in Chromium, the real mouse and keyboard on the bridged view, and
the drawn bars' geometry against the activations."""

import pytest
import torch
from features._saes import hand_encode, random_sae  # tests/features: the SAE written out by hand
from features.test_splice import CLEAN, CORRUPT, hand, spliced
from geometry import measure  # tests/geometry.py

import interplab as ilab
from interplab.views.features import FeatureView

SAE_AT = (1, "post")  # resid_post L1 is block 1's output
METRIC = ilab.logit_diff(" Mary", " John")


@pytest.fixture(scope="module")
def lab():
    return ilab.Lab.load("ioi-tiny")


@pytest.fixture(scope="module")
def sae():
    return random_sae(site="resid_post", layer=1, d_in=128, d_sae=64, seed=3)


@pytest.fixture(scope="module")
def contexts():
    return [p for pair in ilab.zoo.ioi_dataset(8, split="test") for p in (pair["clean"], pair["corrupt"])]


@pytest.fixture()
def view(lab, sae, contexts):
    return lab.features(CLEAN, sae).show(contexts=contexts, metric=METRIC)


def hand_feature_acts(lab, sae, prompt):
    """[pos, d_sae]: the SAE's features of block 1's output, read by a hook written here (after the view's jobs:
    an edit a job applies is a hook on the same model while it runs)."""
    lab.engine.worker.join()
    got = {}
    hand(lab, prompt, SAE_AT, lambda x: got.setdefault("x", x) if "x" not in got else x)
    return hand_encode(sae, got["x"])[0].float()


def probs_of(logits, k=8):
    p = logits[0, -1].softmax(-1)
    return p.topk(k)


def test_the_view_shows_each_tokens_top_features_and_each_features_activations(lab, sae, view, contexts):
    assert isinstance(view, FeatureView)
    want = hand_feature_acts(lab, sae, CLEAN)
    assert view.tokens == lab.to_str_tokens(CLEAN)
    for pos, row in enumerate(view.top):
        top = want[pos].topk(5)
        expected = [(int(i), float(a)) for a, i in zip(*top) if a > 0]
        assert [f for f, _ in row] == [f for f, _ in expected]
        assert [a for _, a in row] == pytest.approx([a for _, a in expected], abs=1e-3)
    corpus = [hand_feature_acts(lab, sae, p) for p in contexts]  # every token of every context prompt, by hand
    for key, panel in view.panels.items():
        f = int(key)
        assert panel["acts"] == pytest.approx(want[:, f].tolist(), abs=1e-3)
        every = torch.cat([a[:, f] for a in corpus])
        best = [v for v in every.topk(5).values.tolist() if v > 0]
        marked = [ctx["acts"][ctx["pos"]] for ctx in panel["contexts"]]  # the token each context marks
        assert marked == pytest.approx(best, abs=1e-3)
        for ctx in panel["contexts"]:  # shading: the context prompt's own activations, token by token
            i = next(i for i, p in enumerate(contexts) if lab.to_str_tokens(p) == ctx["tokens"])
            assert ctx["acts"] == pytest.approx(corpus[i][:, f].tolist(), abs=1e-3)
    assert view.pos == len(view.tokens) - 1 and str(view.feature) in view.panels


def test_steering_and_ablating_the_selected_feature_give_the_hand_hooked_logits(lab, sae, view):
    f = view.feature
    view.send_test_message({"type": "steer", "alpha": 2.5})
    lab.engine.worker.join()
    names = [s["name"] for s in view.logits]
    assert names == ["base", f"F{f} steered (alpha 2.5)"]
    direction = sae.W_dec[f].double()
    steered = hand(lab, CLEAN, SAE_AT, lambda x: (x.double() + 2.5 * direction).to(x.dtype))
    p, ids = probs_of(steered)
    assert view.logits[1]["tokens"] == [lab.tokenizer.decode([int(i)]) for i in ids]
    assert view.logits[1]["probs"] == pytest.approx(p.tolist(), abs=2e-4)
    mary, john = lab.token_id(" Mary"), lab.token_id(" John")
    assert view.metric["values"][names[1]] == pytest.approx(float(steered[0, -1, mary] - steered[0, -1, john]),
                                                            abs=1e-4)

    view.send_test_message({"type": "steer", "alpha": 0.0})
    view.send_test_message({"type": "ablate", "on": True})
    lab.engine.worker.join()
    ablated = hand(lab, CLEAN, SAE_AT, spliced(sae, lambda fs, x: fs.index_fill_(-1, torch.tensor([f]), 0.0)))
    p, ids = probs_of(ablated)
    assert view.logits[1]["name"] == f"F{f} ablated"
    assert view.logits[1]["probs"] == pytest.approx(p.tolist(), abs=2e-4)
    assert lab.hooks() == []


def test_the_view_shows_as_many_features_per_token_as_were_asked_for(lab, sae, contexts):
    view = lab.features(CLEAN, sae, k=3).show(contexts=contexts)
    assert max(len(row) for row in view.top) == 3


def test_a_feature_opens_the_view_on_a_prompt_with_it_selected(lab, sae, contexts):
    view = lab.feature(sae, 7).show(CORRUPT, contexts=contexts)
    lab.engine.worker.join()
    assert view.feature == 7 and "7" in view.panels and view.tokens == lab.to_str_tokens(CORRUPT)
    assert view.panels["7"]["acts"] == pytest.approx(hand_feature_acts(lab, sae, CORRUPT)[:, 7].tolist(), abs=1e-3)


def test_a_feature_the_page_lacks_gets_its_panel_from_the_kernel(lab, sae, view):
    missing = next(i for i in range(sae.d_sae) if str(i) not in view.panels)
    reply = view.send_test_message({"type": "feature", "index": missing})
    lab.engine.worker.join()
    assert reply["ok"] and view.feature == missing and str(missing) in view.panels
    want = hand_feature_acts(lab, sae, CLEAN)[:, missing]
    assert view.panels[str(missing)]["acts"] == pytest.approx(want.tolist(), abs=1e-3)


@pytest.mark.parametrize("msg", [
    {"type": "token", "pos": 99}, {"type": "feature", "index": 64}, {"type": "feature", "index": -1},
    {"type": "steer", "alpha": 1e9}, {"type": "steer", "alpha": float("nan")}, {"type": "ablate", "on": "yes"},
    {"type": "zap"},
])
def test_bad_requests_are_answered_and_change_nothing(lab, view, msg):
    lab.engine.worker.join()  # the first bars
    before = {k: getattr(view, k) for k in ("pos", "feature", "alpha", "ablate", "logits")}
    reply = view.send_test_message(msg)
    lab.engine.worker.join()
    assert reply["ok"] is False and reply["error"]
    assert {k: getattr(view, k) for k in before} == before
    assert lab.hooks() == []


# ------------------------------------------------------------------------------------------------ in Chromium
@pytest.mark.browser
def test_clicks_paint_at_once_and_the_bars_are_the_numbers(page, mount, lab, sae, contexts, monkeypatch):
    from bridge import Bridge  # tests/widgets/bridge.py

    view = lab.features(CLEAN, sae).show(contexts=contexts, metric=METRIC)
    lab.engine.worker.join()
    b = Bridge(view, mount, monkeypatch)
    w = b.w
    page.wait_for_function("() => document.querySelectorAll('.il-fprompt .il-ftok').length > 0")
    # the prompt's tokens, left to right in reading order
    boxes = w.js("(w) => [...w.el.querySelector('.il-fprompt .il-ftokens').children].map((s) => { const r = "
                 "s.getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; })")
    assert len(boxes) == len(view.tokens)
    assert all((b2[1] > b1[1] + 1) or (abs(b2[1] - b1[1]) < 1 and b2[0] >= b1[0] + b1[2] - 0.5)
               for b1, b2 in zip(boxes, boxes[1:]))
    # a real click on token 3: the page paints its top features before the kernel has heard of it
    x, y, wd, ht = boxes[3]
    page.mouse.click(x + wd / 2, y + ht / 2)
    rows = w.js("(w) => [...w.el.querySelectorAll('.il-frow')].map((r) => [Number(r.dataset.feature), "
                "Number(r.dataset.act), r.querySelector('.il-fill').getBoundingClientRect().width, "
                "r.querySelector('.il-track').getBoundingClientRect().width])")
    assert [r[0] for r in rows] == [f for f, _ in view.top[3]]
    assert [r[1] for r in rows] == pytest.approx([a for _, a in view.top[3]], abs=1e-6)
    top = max(r[1] for r in rows)
    for _, act, fill, track in rows:  # each bar's length is its activation on one scale
        assert fill == pytest.approx(track * act / top, abs=1.0)
    w.wait_sent(1)
    assert w.requests[-1] == {"type": "token", "pos": 3}
    b.pump(lab)
    assert view.pos == 3
    # a real click on its second feature: the panel paints from the page's data, then the kernel's bars come
    second = rows[1][0] if len(rows) > 1 else rows[0][0]
    row = page.locator(f".il-frow[data-feature='{second}']")
    row.click()
    title = w.js("(w) => w.el.querySelector('.il-fpanel .il-bars-title').textContent")
    assert title.startswith(f"F{second}:")
    shades = w.js("(w) => [...w.el.querySelector('.il-fprompt .il-ftokens').children]"
                  ".map((s) => Number(s.dataset.act))")
    assert shades == pytest.approx(view.panels[str(second)]["acts"], abs=1e-6)
    b.pump(lab)
    assert view.feature == second
    # the keyboard on the slider: ArrowRight steps alpha by 0.1; the kernel's steered bars are drawn
    page.locator(".il-falpha").focus()
    for _ in range(5):
        page.keyboard.press("ArrowRight")
    page.wait_for_timeout(50)
    b.pump(lab)
    b.pump(lab)
    assert view.alpha == pytest.approx(0.5)
    drawn = w.js("(w) => [...w.el.querySelectorAll('.il-series')].map((s) => s.querySelector('.il-series-name')"
                 ".textContent)")
    assert drawn == [s["name"] for s in view.logits] and drawn[1] == f"F{second} steered (alpha 0.5)"
    # the metric line as the logit panel's: each label, " = ", its value, gaps between (not "alpha 0.5 1.23")
    values = view.metric["values"]
    want = f"{view.metric['name']}: " + "   ".join(f"{k} = {v:.4f}" for k, v in values.items())
    assert w.js("(w) => w.el.querySelector('.il-fmetric').textContent") == want
    page.screenshot(path="artifacts/feature_view.png", full_page=True)


@pytest.mark.browser
def test_in_a_shadow_root_an_older_alpha_coming_back_does_not_pull_the_slider_from_the_keyboard(
        page, lab, sae, contexts, mount, monkeypatch):
    """marimo draws the view in a shadow root, where document.activeElement is the host, not the slider. The kernel's
    answer to the first key press arrives after the second: the slider keeps the second, and the third steps from it."""
    from bridge import Bridge  # tests/widgets/bridge.py

    view = lab.features(CLEAN, sae).show(contexts=contexts, metric=METRIC)
    lab.engine.worker.join()
    b = Bridge(view, mount, monkeypatch, shadow=True)
    w = b.w
    assert w.js("(w) => w.el.getRootNode() instanceof ShadowRoot")
    slider = "(w) => w.el.querySelector('.il-falpha')"
    keys = page.locator(w.sel(".il-falpha"))  # (Playwright's CSS reaches into open shadow roots)
    alphas = lambda: [m["alpha"] for m in w.requests if m["type"] == "steer"]  # noqa: E731
    keys.press("ArrowRight")
    page.wait_for_function("(i) => window.W(i).model.sent.some((m) => m.type === 'steer')", arg=w.i)
    b.to_kernel(lab)  # the kernel has taken alpha 0.1; its answer is on the way
    keys.press("ArrowRight")
    # (the view sends at most one steer per frame, the latest value: wait for the second's frame, or a slow frame
    #  would fold the second press into the third's request)
    page.wait_for_function("(i) => window.W(i).model.sent.filter((m) => m.type === 'steer').length >= 2", arg=w.i)
    painted = w.paints()
    b.to_page()  # ... and arrives after the second press
    w.wait_paints(painted + 1)
    assert w.js(f"(w) => Number(({slider})(w).value)") == pytest.approx(0.2, abs=1e-9)
    keys.press("ArrowRight")
    page.wait_for_function("(i) => window.W(i).model.sent.filter((m) => m.type === 'steer').length >= 3", arg=w.i)
    assert alphas() == pytest.approx([0.1, 0.2, 0.3], abs=1e-9)
    b.pump(lab)
    assert view.alpha == pytest.approx(0.3)
    assert view.logits[1]["name"].endswith("steered (alpha 0.3)")
    assert not ilab.attached_hooks()


def test_the_tokens_a_feature_raises_and_lowers_are_named_as_every_view_names_them(lab):
    """ioi-tiny's SAE: a feature whose decoder direction lowers lone byte pieces of a character (each decodes alone
    to U+FFFD) lists them by their bytes ('<C3>'), every other token by its text; the tokens, by hand: the
    unembedding of the direction through the final LayerNorm (centred, times its weight)."""
    from interplab.views.features import feature_panels

    sae = ilab.SAE.load("ioi-tiny-sae")
    tok, m = lab.tokenizer, lab.model
    byte_decoder = {c: b for b, c in _bytes_to_unicode().items()}

    def named(i):
        text = tok.decode([i])
        if "\ufffd" not in text:
            return text
        return "<" + " ".join(f"{byte_decoder[c]:02X}" for c in tok.convert_ids_to_tokens(i)) + ">"

    def by_hand(f):
        d = sae.W_dec[f].detach()
        return m.lm_head.weight.detach() @ ((d - d.mean()) * m.transformer.ln_f.weight.detach())

    feature = next(f for f in range(sae.d_sae)
                   if any("\ufffd" in tok.decode([int(i)]) for i in by_hand(f).topk(6, largest=False).indices))
    panel = feature_panels(lab.engine, sae, CLEAN, [feature], None)[str(feature)]
    values = by_hand(feature)
    for shown, top in ((panel["raised"], values.topk(len(panel["raised"]))),
                       (panel["lowered"], values.topk(len(panel["lowered"]), largest=False))):
        assert [t for t, _ in shown] == [named(int(i)) for i in top.indices]
        assert [v for _, v in shown] == pytest.approx(top.values.tolist(), abs=1e-3)
    assert not any("\ufffd" in t for t, _ in panel["raised"] + panel["lowered"])
    assert any(t.startswith("<") and t.endswith(">") for t, _ in panel["lowered"])
    # the analysis prints them so too: Feature.logit_effects() names each token as the view does
    effects = lab.feature(sae, feature).logit_effects(k=len(panel["lowered"]))
    assert [t for t, _ in effects.lowered] == [named(int(i)) for i in values.topk(len(panel["lowered"]),
                                                                                 largest=False).indices]
    assert "\ufffd" not in repr(effects) and "<" in repr(effects)


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table (the byte-level BPE's alphabet), written out here."""
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


# ------------------------------------------------------------------------------------ the feature page (statistics)
@pytest.fixture(scope="module")
def corpus_stats(lab, sae, contexts):
    from interplab.analyses.feature_stats import feature_stats

    return feature_stats(lab, contexts, sae, top_k=3, n_bands=3, per_band=2, cache=False, progress=False)


def test_with_statistics_each_feature_shows_its_density_and_its_page_from_the_corpus(lab, sae, contexts,
                                                                                      corpus_stats):
    """Densities and each panel's top example against the SAE run by hand over the same corpus (a hook on block 1's
    output, tests/features/_saes.py's encode); the prompts' contexts are not searched when statistics are given."""
    view = lab.features(CLEAN, sae).show(stats=corpus_stats)
    lab.engine.worker.join()
    assert view.explorer.contexts is None
    fired, total, best = torch.zeros(sae.d_sae), 0, torch.zeros(sae.d_sae)
    for doc in contexts:
        acts = hand_feature_acts(lab, sae, doc)
        fired += (acts > 0).sum(0)
        total += acts.shape[0]
        best = torch.maximum(best, acts.max(0).values)
    shown = {int(f) for row in view.top for f, _ in row}
    assert shown and set(map(int, view.densities)) == shown
    for f in shown:
        assert view.densities[str(f)] == pytest.approx(float(fired[f] / total), abs=1e-6)
        panel = view.panels[str(f)]
        assert panel["contexts"] == [] and f"{len(contexts):,} documents" in panel["corpus"]
        page = panel["stats"]
        assert page["density"] == pytest.approx(float(fired[f] / total), abs=1e-6)
        if fired[f] > 0:
            assert page["max"] == pytest.approx(float(best[f]), rel=1e-4)
            top = page["top"][0]
            assert top["act"] == pytest.approx(float(best[f]), rel=1e-4)
            doc = lab.to_str_tokens(contexts[top["doc"]])
            assert top["tokens"][top["at"]] == doc[top["pos"]]  # the marked token is the one it fired on
    # the selected feature's page is whole; the others' are previews (the first examples), whole once selected
    assert "partial" not in view.panels[str(view.feature)]["stats"]
    preview = next(f for f in shown if view.panels[str(f)]["stats"].get("partial"))
    page = view.panels[str(preview)]["stats"]
    whole = corpus_stats.feature(preview)
    def same(shown, want):  # the page's examples: the statistics' first ones (their activations to 4 decimals)
        return [(e["doc"], e["pos"], e["tokens"]) for e in shown] == [(e["doc"], e["pos"], e["tokens"])
                                                                       for e in want[:len(shown)]] \
            and all(abs(e["act"] - w["act"]) <= 1e-4 for e, w in zip(shown, want))

    assert same(page["top"], whole["top"])
    assert all(same(b, w) for b, w in zip(page["bands"], whole["bands"]))
    assert sum(map(len, page["bands"])) < sum(map(len, whole["bands"]))
    assert view.send_test_message({"type": "feature", "index": preview})["ok"]
    lab.engine.worker.join()
    got = view.panels[str(preview)]["stats"]
    assert "partial" not in got and len(got["top"]) == len(whole["top"])
    assert [len(b) for b in got["bands"]] == [len(b) for b in whole["bands"]]
    assert [e["act"] for e in got["top"]] == pytest.approx([e["act"] for e in whole["top"]], abs=1e-4)
    # a feature the page lacks gets its density with its panel
    missing = next(f for f in range(sae.d_sae) if str(f) not in view.panels)
    view.explorer.select(missing)
    lab.engine.worker.join()
    assert view.densities[str(missing)] == pytest.approx(float(fired[missing] / total), abs=1e-6)
    assert view.panels[str(missing)]["stats"]["feature"] == missing


def test_the_shipped_sae_opens_with_its_shipped_statistics(lab):
    """ioi-tiny-sae's view: its panels come from the statistics over its own training corpus (not from IOI
    prompts), and its dense features are the statistics' dense ones."""
    from interplab.analyses.feature_stats import DENSE

    sae = ilab.SAE.load("ioi-tiny-sae")
    view = lab.features(CLEAN, sae).show()
    stats = view.explorer.stats
    assert stats is not None and view.explorer.contexts is None
    assert stats.n_docs >= 10_000  # its training corpus, not 200 IOI prompts
    assert all(f"{stats.n_docs:,} documents" in p["corpus"] for p in view.panels.values())
    assert all(p["contexts"] == [] and p["stats"]["top"] for p in view.panels.values())
    dense = {f for f, d in view.densities.items() if d > DENSE}
    assert dense and dense <= {str(f) for f in stats.dense()}
    # contexts= asks for prompts instead; stats=False for none
    by_prompts = lab.features(CLEAN, sae).show(contexts=[CLEAN, CORRUPT])
    assert by_prompts.explorer.stats is None and by_prompts.densities == {}
    assert all("stats" not in p for p in by_prompts.panels.values())


@pytest.mark.parametrize("bad", ["yes", 3])
def test_statistics_of_another_kind_or_sae_are_refused(lab, sae, bad):
    with pytest.raises(ilab.InterplabError, match="stats="):
        lab.features(CLEAN, sae).show(stats=bad)
    from interplab.analyses.feature_stats import feature_stats

    shipped = feature_stats(lab, None, ilab.SAE.load("ioi-tiny-sae"))
    with pytest.raises(ilab.InterplabError, match="another SAE"):
        lab.features(CLEAN, sae).show(stats=shipped)
    assert lab.hooks() == []


@pytest.mark.browser
def test_the_feature_page_draws_density_histogram_and_examples(page, mount, lab, sae, contexts, corpus_stats,
                                                              monkeypatch):
    """In Chromium: each token's feature rows carry their density (a dense one marked), and the panel draws the
    feature's page: one histogram bar per bin, taller for more firings; each example with its firing token marked;
    nothing wider than the view."""
    from bridge import Bridge  # tests/widgets/bridge.py

    view = lab.features(CLEAN, sae).show(stats=corpus_stats)
    lab.engine.worker.join()
    b = Bridge(view, mount, monkeypatch)
    w = b.w
    page.wait_for_function("() => document.querySelectorAll('.il-frow').length > 0")
    rows = w.js("(w) => [...w.el.querySelectorAll('.il-frow')].map((r) => [Number(r.dataset.feature), "
                "Number(r.querySelector('.il-fdensity').dataset.value), !!r.querySelector('.il-dense')])")
    assert rows
    for f, d, marked in rows:
        assert d == pytest.approx(view.densities[str(f)], abs=1e-9)
        assert marked == (d > view.dense_threshold)
    f = view.feature
    st = view.panels[str(f)]["stats"]
    bars = w.js("(w) => [...w.el.querySelectorAll('.il-fpanel .il-histogram rect')].map((r) => "
                "[Number(r.dataset.count), r.getBoundingClientRect().height])")
    assert [c for c, _ in bars] == st["hist_counts"]
    for (c1, h1), (c2, h2) in zip(bars, bars[1:]):
        if c1 < c2:
            assert h1 < h2
    examples = w.js("(w) => [...w.el.querySelectorAll('.il-fpanel .il-context')].map((e) => [Number(e.dataset.act), "
                    "[...e.querySelectorAll('mark.il-fire')].map((m) => m.textContent)])")
    want = st["top"] + [e for band in st["bands"] for e in band]
    assert [a for a, _ in examples] == pytest.approx([e["act"] for e in want], rel=1e-6)
    for (_, marks), e in zip(examples, want):
        assert marks == [e["tokens"][e["at"]].replace("\n", "↵")]
    # 460: a notebook beside JupyterLab's sidebar in a 900 px window (a row's density wraps under it there, the
    # slider and histogram narrow)
    for px_width in (900, 460):
        page.evaluate("(px) => { document.body.style.width = px + 'px'; }", px_width)
        page.wait_for_timeout(150)
        outer = w.js("(w) => w.el.getBoundingClientRect().right")
        inner = w.js("(w) => Math.max(...[...w.el.querySelectorAll('.il-fpanel *, .il-ftop *')].map((e) => "
                     "e.getBoundingClientRect().right))")
        assert inner <= outer + 1, px_width
        out = measure(page, "(i) => window.W(i).el", w.i)
        assert out["problems"] == [], (px_width, out["problems"])
    page.evaluate("() => { document.body.style.width = '900px'; }")
    page.screenshot(path="artifacts/feature_page.png", full_page=True)
