"""Bare-page browser fixtures: Debian's Chromium driven by python playwright, the bundle served via page.route.

No network, no `playwright install`: CI installs Chromium with `apt-get install -y chromium`.
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys
import types

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "interplab" / "static" / "widgets.js"
HARNESS = pathlib.Path(__file__).with_name("harness.html")
ORIGIN = "http://interplab.test"


def _widgets_importable_alone() -> None:
    """The widget package must not depend on the rest of interplab: when `import interplab` is broken (someone is
    mid-edit), stand in an empty parent package so `interplab.widgets` still imports for these tests."""
    if "interplab" in sys.modules:
        return
    try:
        import interplab  # noqa: F401
    except Exception:  # noqa: BLE001
        for name in [m for m in sys.modules if m == "interplab" or m.startswith("interplab.")]:
            del sys.modules[name]
        pkg = types.ModuleType("interplab")
        pkg.__path__ = [str(ROOT / "interplab")]
        pkg.__spec__ = importlib.util.spec_from_loader("interplab", loader=None, is_package=True)
        sys.modules["interplab"] = pkg


_widgets_importable_alone()

@pytest.fixture(scope="session")
def browser(chromium):
    return chromium  # tests/conftest.py


@pytest.fixture(scope="session")
def bundle_bytes():
    assert BUNDLE.exists(), f"{BUNDLE} is missing: run `cd js && npm ci && npm run build`"
    return BUNDLE.read_bytes()


@pytest.fixture(scope="session")
def _harness(browser, bundle_bytes):
    """One page with the harness and the bundle loaded, shared by the tests (loading plotly costs ~3 s)."""
    context = browser.new_context(viewport={"width": 1000, "height": 900})
    pg = context.new_page()
    errors: list[str] = []
    requests: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))

    def route(r):
        url = r.request.url
        requests.append(url)
        if url == f"{ORIGIN}/" or url == f"{ORIGIN}/index.html":
            return r.fulfill(status=200, content_type="text/html", body=HARNESS.read_text())
        if url == f"{ORIGIN}/static/widgets.js":
            return r.fulfill(status=200, content_type="text/javascript", body=bundle_bytes)
        return r.abort()

    pg.route("**/*", route)
    pg.goto(f"{ORIGIN}/index.html")
    pg.wait_for_function("window.__harness_ready === true", timeout=30000)
    pg.errors = errors
    pg.requests = requests
    try:
        yield pg
    finally:
        context.close()


@pytest.fixture
def page(_harness):
    """The shared page, reset (all widgets unmounted) before each test; fails the test on JS errors or network use."""
    pg = _harness
    pg.evaluate("window.__reset()")
    pg.mouse.move(0, 0)
    pg.errors.clear()
    pg.requests.clear()
    yield pg
    foreign = [u for u in pg.requests if not u.startswith(ORIGIN) and not u.startswith("data:")]
    assert not foreign, f"the page tried to reach the network: {foreign}"
    assert not pg.errors, f"JS errors on the page: {pg.errors}"


class Mounted:
    """A widget rendered on the bare page with a fake model."""

    def __init__(self, page, kind: str, traits: dict, shadow: bool = False):
        self.page = page
        self.kind = kind
        self.i = page.evaluate("([k, t, s]) => window.mount(k, t, {shadow: s})", [kind, traits, shadow])

    def js(self, body: str, arg=None):
        """Evaluate `body` as a function of (w, arg) where w = {model, el}."""
        return self.page.evaluate(f"([i, arg]) => {{ const w = window.W(i); return ({body})(w, arg); }}", [self.i, arg])

    @property
    def sent(self) -> list[dict]:
        return self.js("(w) => w.model.sent")

    @property
    def requests(self) -> list[dict]:
        """What the view sent, without the ids, which must be integers increasing from one request to the next."""
        sent = self.sent
        ids = [m.get("id") for m in sent]
        assert all(isinstance(i, int) and not isinstance(i, bool) for i in ids), sent
        assert ids == sorted(set(ids)), f"request ids must increase: {ids}"
        return [{k: v for k, v in m.items() if k != "id"} for m in sent]

    def clear_sent(self):
        self.js("(w) => { w.model.sent.length = 0; }")

    def receive(self, msg: dict):
        """The fake kernel sends `msg` (e.g. a reply) to the view."""
        self.js("(w, m) => w.model.receive(m)", msg)

    def set(self, **traits):
        self.js("(w, t) => { for (const [k, v] of Object.entries(t)) w.model.set(k, v); }", traits)

    def paints(self) -> int:
        return self.page.evaluate("(k) => window.paintsOf(k)", self.kind)

    def wait_paints(self, n: int, timeout: float = 10000):
        self.page.wait_for_function("([k, n]) => window.paintsOf(k) >= n", arg=[self.kind, n], timeout=timeout)

    def wait_sent(self, n: int, timeout: float = 5000):
        self.page.wait_for_function("([i, n]) => window.W(i).model.sent.length >= n", arg=[self.i, n], timeout=timeout)

    def sel(self, css: str) -> str:
        """A CSS selector scoped to this widget's mount element."""
        return f".mount:nth-child({self.i + 1}) {css}"


@pytest.fixture
def mount(page):
    def _mount(kind: str, _shadow: bool = False, **traits) -> Mounted:
        return Mounted(page, kind, traits, shadow=_shadow)

    return _mount
