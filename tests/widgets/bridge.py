"""A real Python widget behind a bare-page view (tests/widgets/conftest.py's fake model), without a kernel."""

from __future__ import annotations


class Bridge:
    """The real Python widget behind a bare-page view: what the widget sends (trait updates, replies) reaches the
    page's model; what the page sends goes to the widget's comm handler, as the comm would deliver it."""

    def __init__(self, widget, mount, monkeypatch, shadow: bool = False):
        self.widget, self.out, self.seen = widget, [], 0
        monkeypatch.setattr(widget, "_send", lambda msg, buffers=None: self.out.append(msg))
        state = {k: v for k, v in widget.get_state().items() if k not in ("_esm", "_bundle", "layout")}
        self.w = mount(widget._view_kind, _shadow=shadow, **state)  # shadow: in a shadow root, as marimo draws it

    def pump(self, lab=None):
        """Page -> kernel (every new request), the worker's jobs, then kernel -> page (every message)."""
        self.to_kernel(lab)
        self.to_page()

    def to_kernel(self, lab=None):
        """Page -> kernel (every new request) and the worker's jobs; what the kernel sends back waits for to_page()."""
        sent = self.w.sent
        for msg in sent[self.seen:]:
            self.widget._handle_msg({"content": {"data": {"method": "custom", "content": msg}}, "buffers": []})
        self.seen = len(sent)
        if lab is not None:
            lab.engine.worker.join()

    def to_page(self):
        """Kernel -> page: every message the widget sent since the last delivery."""
        out, self.out[:] = list(self.out), []
        for msg in out:
            if msg["method"] == "update":
                self.w.set(**msg["state"])
            elif msg["method"] == "custom":
                self.w.receive(msg["content"])
