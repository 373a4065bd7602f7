"""The committed bundle: present, small enough, offline (no CDN imports), and built from the current js/src."""

from __future__ import annotations

import hashlib
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
JS = ROOT / "js"
BUNDLE = ROOT / "interplab" / "static" / "widgets.js"


def source_hash() -> str:
    """Same recipe as js/build.mjs: sorted js/src/**, package-lock.json, then the protocol declaration the bundle
    includes, each as path NUL bytes NUL."""
    files = sorted(p.relative_to(JS).as_posix() for p in (JS / "src").rglob("*") if p.is_file())
    files += ["package-lock.json", "../interplab/widgets/protocol.json"]
    h = hashlib.sha256()
    for rel in files:
        h.update(rel.encode() + b"\0")
        h.update((JS / rel).read_bytes())
        h.update(b"\0")
    return h.hexdigest()


def test_bundle_exists_and_is_small():
    assert BUNDLE.exists(), f"{BUNDLE} is missing: run `cd js && npm ci && npm run build`"
    size = BUNDLE.stat().st_size
    assert 100_000 < size < 4_000_000, f"bundle is {size} bytes"


def test_bundle_has_no_cdn_imports():
    text = BUNDLE.read_text(encoding="utf-8")
    assert not re.search(r"""\bimport\s*\(\s*["'`]https?://""", text), "dynamic import from the network"
    assert not re.search(r"""\b(?:import|from)\s*["'`]https?://""", text), "static import from the network"
    assert not re.search(r"""<script[^>]+src=["']https?://""", text), "script tag from the network"
    for cdn in ("cdn.jsdelivr.net", "unpkg.com", "esm.sh", "cdnjs.cloudflare.com", "cdn.skypack.dev"):
        assert cdn not in text, f"bundle mentions the CDN {cdn}"
    assert "export" in text and "default" in text  # an ES module with a default export


def test_bundle_is_built_from_current_sources():
    if not (JS / "src").is_dir() or not (JS / "package-lock.json").exists():
        pytest.skip("js sources are not in this checkout (installed wheel)")
    first = BUNDLE.read_text(encoding="utf-8").split("\n", 1)[0]
    m = re.fullmatch(r"/\* interplab-src-hash: ([0-9a-f]{64}) \*/", first.strip())
    assert m, f"bundle does not start with the source hash comment: {first[:120]!r}"
    assert m.group(1) == source_hash(), (
        "interplab/static/widgets.js is stale (js/src, package-lock.json or protocol.json changed): "
        "run `cd js && npm ci && npm run build` and commit the bundle"
    )


def test_widget_classes_point_at_the_bundle():
    from interplab.widgets.base import BUNDLE as used

    assert pathlib.Path(used) == BUNDLE
