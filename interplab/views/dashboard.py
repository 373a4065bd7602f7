"""The dashboard (lab.show): the patching explorer, then tabs for steering, the logit lens and attention, one
anywidget."""

from __future__ import annotations

from ..engine import Engine, engine_of
from ..widgets.composite import Composite
from ..widgets.jobs import settle_in_batch
from .attention import attention_widget
from .lens import lens_widget
from .patching import PatchExplorer, PatchSession
from .steering import SteeringController


class Dashboard(Composite):
    """Heatmap + logits, then tabs: steering, logit lens and attention, for one clean/corrupt pair; one anywidget.
    `dashboard.explorer` (heatmap + logits), `.steering` (its controller; `.steering.panel`), `.lens`, `.attention`
    are the widgets as ever; they open no comm of their own (their state travels in the dashboard's)."""

    def __init__(self, lab: Engine, clean: str, corrupt: str, answer, wrong, site: str = "resid_pre",
                 by=("layer", "pos"), direction: str = "denoise", sweep: bool = True, progressive: bool = False):
        engine = engine_of(lab)
        session = PatchSession(engine, clean, corrupt, answer, wrong, site, tuple(by), direction)
        self.explorer = PatchExplorer(session, part=True)
        self.heatmap, self.logits = self.explorer.heatmap, self.explorer.logits
        self.steering = SteeringController(engine, corrupt, [clean], [corrupt], site="resid_post", part=True)
        self.lens = lens_widget(engine, clean, part=True)
        self.attention = attention_widget(engine, clean, part=True)
        super().__init__(
            {"heatmap": self.heatmap, "logits": self.logits, "steering": self.steering.panel, "lens": self.lens,
             "attention": self.attention},
            panes=[{"part": "heatmap"}, {"part": "logits"},
                   {"tabs": [{"title": "steering", "part": "steering"}, {"title": "logit lens", "part": "lens"},
                             {"title": "attention", "part": "attention"}]}])
        if sweep:  # progressive: the attribution estimate first, exact cells largest |estimate| first
            self.explorer.sweep(progressive=progressive)
        # run by nbclient (`jupyter nbconvert --execute`): every part's first picture and the sweep end in this cell,
        # so the notebook it saves holds the final dashboard, not "sweeping..." over a grey grid
        settle_in_batch(self.explorer.worker)
