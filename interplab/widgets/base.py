"""LabWidget: the thin anywidget base every interplab view shares.

A widget is state (synced traits, set by Python only) + validated requests from the frontend + Python callbacks.
This machinery never imports torch: each view module (``interplab.views.<kind>``) turns results into plain numbers
and sets traits; the widget turns requests into callback calls.

The requests each view may send are declared once, on its class (``REQUESTS``; kernel -> page messages in
``MESSAGES``; the traits are its synced traits). ``protocol.json`` is generated from the classes
(``python -m interplab.views``) and bundled, so the page checks each request against the same declaration before
sending it; a test fails when the file and the classes differ. ``_validate`` checks a request against that
declaration (known ``type``, an ``id``, no unexpected fields, each field's type, required or optional), then against
the widget's ``_limits()`` (ranges that follow the current traits). Every request gets exactly one reply,
``{type: "reply", id, ok, error?}``, after the widget's own handling and its callbacks. A malformed request, or a
callback that raises, also sets ``self.error`` to a readable text; nothing ever raises into the kernel's comm
handler.

The widget code (static/widgets.js, 1.2 MB with plotly's core and heatmap) is synced once per kernel, not once per
widget: every view's ``_esm`` is the small static/loader.js, and its ``_bundle`` trait references one shared
``BundleHolder`` model that holds the code; the loader imports it once per page. An executed notebook stores the
holder's state once (notebook 01: 14.4 MB -> under 2 MB). Frontends without ipywidgets' widget manager (marimo) get
the whole bundle as ``_esm`` (``esm_mode()``).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import logging
import math
import os
import pathlib
import sys
import threading
import weakref
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any

import anywidget
import ipywidgets
import traitlets as t

from .parts import Part

__all__ = [
    "LabWidget",
    "MessageError",
    "Int",
    "Float",
    "Bool",
    "Str",
    "Choice",
    "plain",
    "Converted",
    "plain_grid",
    "str_grid",
    "NumberGrid",
    "TextGrid",
    "Labels",
    "PROTOCOL",
    "declared_requests",
    "BundleHolder",
    "bundle_holder",
    "esm_mode",
]

log = logging.getLogger("interplab.widgets")

BUNDLE = pathlib.Path(__file__).resolve().parent.parent / "static" / "widgets.js"
LOADER = BUNDLE.with_name("loader.js")  # every view's _esm (in Jupyter): finds the shared code, imports it once
PROTOCOL_FILE = pathlib.Path(__file__).with_name("protocol.json")
#: the generated declaration the bundle carries (tests compare it with protocol(), built from the classes)
PROTOCOL = json.loads(PROTOCOL_FILE.read_text(encoding="utf-8"))
COMMON_TRAITS = ("_view_kind", "status", "error")  # every view's
VIEW_CLASSES: dict[str, type] = {}  # view kind -> its widget class, filled as each class is defined

#: prefix of every error the widget sets for a bad message
BAD_MESSAGE = "bad message from the frontend: "
MAX_STR = 100_000  # bound for every declared string (prompts, newline-separated contrast prompts)
MAX_NAME = 200  # bound for ids, names, site strings


class MessageError(ValueError):
    """A frontend message failed validation."""


# ---------------------------------------------------------------------------------------------- field checkers
class Field:
    optional = False

    def check(self, key: str, value: Any) -> Any:  # pragma: no cover - interface
        raise NotImplementedError


class Int(Field):
    """An int (not a bool) in [lo, hi] (inclusive; None = unbounded)."""

    def __init__(self, lo: int | None = None, hi: int | None = None, *, optional: bool = False):
        self.lo, self.hi, self.optional = lo, hi, optional

    def check(self, key, value):
        if isinstance(value, bool) or not isinstance(value, int):
            raise MessageError(f"{key!r} must be an integer, got {type(value).__name__} {_short(value)}")
        if self.lo is not None and self.hi is not None and self.hi < self.lo:
            raise MessageError(f"{key!r}={value} is out of range: nothing to select yet (empty)")
        if (self.lo is not None and value < self.lo) or (self.hi is not None and value > self.hi):
            raise MessageError(f"{key!r}={value} is out of range {self.lo}..{self.hi}")
        return value


class Float(Field):
    """A finite number in [lo, hi]; ints are accepted and converted."""

    def __init__(self, lo: float | None = None, hi: float | None = None, *, optional: bool = False):
        self.lo, self.hi, self.optional = lo, hi, optional

    def check(self, key, value):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise MessageError(f"{key!r} must be a number, got {type(value).__name__} {_short(value)}")
        value = float(value)
        if not math.isfinite(value):
            raise MessageError(f"{key!r} must be a finite number, got {value}")
        if (self.lo is not None and value < self.lo) or (self.hi is not None and value > self.hi):
            raise MessageError(f"{key!r}={value} is out of range {self.lo}..{self.hi}")
        return value


class Bool(Field):
    def __init__(self, *, optional: bool = False):
        self.optional = optional

    def check(self, key, value):
        if not isinstance(value, bool):
            raise MessageError(f"{key!r} must be true or false, got {type(value).__name__} {_short(value)}")
        return value


class Str(Field):
    def __init__(self, max_len: int = MAX_STR, *, min_len: int = 0, optional: bool = False):
        self.max_len, self.min_len, self.optional = max_len, min_len, optional

    def check(self, key, value):
        if not isinstance(value, str):
            raise MessageError(f"{key!r} must be a string, got {type(value).__name__} {_short(value)}")
        if len(value) > self.max_len:
            raise MessageError(f"{key!r} is too long: {len(value)} characters (at most {self.max_len})")
        if len(value) < self.min_len:
            raise MessageError(f"{key!r} must not be empty")
        return value


class Choice(Field):
    def __init__(self, choices, *, optional: bool = False):
        self.choices, self.optional = tuple(choices), optional

    def check(self, key, value):
        if not isinstance(value, str) or value not in self.choices:
            allowed = ", ".join(repr(c) for c in self.choices) or "(none available)"
            raise MessageError(f"{key!r} must be one of {allowed}, got {_short(value)}")
        return value


def _short(value: Any, n: int = 60) -> str:
    try:
        s = repr(value)
    except Exception:  # noqa: BLE001
        s = f"<{type(value).__name__}>"
    return s if len(s) <= n else s[: n - 3] + "..."


# ---------------------------------------------------------------------------------------------- trait helpers
def plain(x: Any) -> Any:
    """Tensors / arrays -> nested lists (duck-typed ``tolist``; torch is never imported here)."""
    if hasattr(x, "tolist") and not isinstance(x, (str, bytes)):
        x = x.tolist()
    if isinstance(x, tuple):
        x = list(x)
    return x


def _num_or_none(v: Any) -> float | None:
    v = plain(v)
    if v is None or isinstance(v, bool):
        return None if v is None else float(v)
    try:
        f = float(v)
    except (TypeError, ValueError) as e:
        raise t.TraitError(f"expected a number or None, got {_short(v)}") from e
    return f if math.isfinite(f) else None  # NaN/inf would break the JSON sent to the browser


def plain_grid(x: Any) -> list[list[float | None]]:
    """A 2-D table of numbers; NaN/inf become None (shown as not computed)."""
    x = plain(x)
    if x is None:
        return []
    if not isinstance(x, list):
        raise t.TraitError(f"expected a list of rows (2-D), got {type(x).__name__}")
    rows = []
    for row in x:
        row = plain(row)
        if not isinstance(row, list):
            raise t.TraitError(f"expected a list of rows (2-D), got a row of type {type(row).__name__}")
        rows.append([_num_or_none(v) for v in row])
    return rows


def str_grid(x: Any) -> list[list[str]]:
    x = plain(x)
    if x is None:
        return []
    if not isinstance(x, list):
        raise t.TraitError(f"expected a list of rows of strings, got {type(x).__name__}")
    return [[("" if v is None else str(v)) for v in plain(row)] for row in x]


class Converted(t.TraitType):
    """A list trait that first converts its value (tensors/arrays accepted) with `convert`."""

    info_text = "a list"

    def __init__(self, convert: Callable[[Any], Any], info: str, **kwargs: Any):
        self._convert = convert
        self.info_text = info
        super().__init__(**kwargs)

    def make_dynamic_default(self):
        return []

    def validate(self, obj, value):
        try:
            return self._convert(value)
        except t.TraitError:
            raise
        except Exception as e:  # noqa: BLE001
            raise t.TraitError(f"{self.name}: expected {self.info_text}: {type(e).__name__}: {e}") from e


def NumberGrid(**kwargs: Any) -> t.TraitType:  # noqa: N802 - reads like a trait type
    """2-D list of float | None (NaN/inf -> None); tensors and arrays accepted."""
    return Converted(plain_grid, "a 2-D list of numbers (None = missing)", default_value=[], **kwargs)


def TextGrid(**kwargs: Any) -> t.TraitType:  # noqa: N802
    """2-D list of str (None -> ""). On the wire and in a saved notebook, each distinct string once (see
    text_grid_to_json); in Python the list of rows."""
    return Converted(str_grid, "a 2-D list of strings", default_value=[], **kwargs).tag(
        to_json=text_grid_to_json, from_json=text_grid_from_json)


def text_grid_to_json(grid: list[list[str]], widget: Any = None) -> dict[str, Any]:
    """{"strings": each distinct string once, "index": rows of indices into it}: a sweep's hover repeats a few texts
    over thousands of cells (its unchanged cells, an estimate's one line), a 512 x 14 feature sweep's 7168 cells 46
    texts; the page reads it with plot.js's strGrid."""
    table: dict[str, int] = {}
    index = [[table.setdefault(text, len(table)) for text in row] for row in grid]
    return {"strings": list(table), "index": index}


def text_grid_from_json(value: Any, widget: Any = None) -> Any:
    """The rows of a grid sent as text_grid_to_json writes it (a plain 2-D list passes as it is; anything else too,
    for the trait's own check to refuse with its message)."""
    if isinstance(value, dict) and isinstance(value.get("strings"), list) and isinstance(value.get("index"), list):
        strings = value["strings"]
        try:
            return [[strings[i] for i in row] for row in value["index"]]
        except (IndexError, TypeError):
            return value
    return value


def Labels(**kwargs: Any) -> t.TraitType:  # noqa: N802
    """list[str]; any iterable of strings (or tensor-like) accepted."""
    return Converted(lambda v: [str(s) for s in (plain(v) or [])], "a list of strings", default_value=[], **kwargs)


# ---------------------------------------------------------------------------------------------- the declaration
_TYPES = {"int": Int, "number": Float, "bool": Bool, "string": Str}


def declared_field(spec: str | list[str]) -> Field:
    """A protocol.json field: "int" | "number" | "bool" | "string" (+ "?" = optional), or a list = one of these."""
    if isinstance(spec, list):
        return Choice(spec)
    return _TYPES[spec.removesuffix("?")](optional=spec.endswith("?"))


@functools.cache
def declared_requests(view_kind: str) -> dict[str, dict[str, Field]]:
    """{request type: {field: checker}} of a view, as its class declares them (no requests for unknown kinds)."""
    cls = VIEW_CLASSES.get(view_kind)
    requests = cls.REQUESTS if cls is not None else {}
    return {kind: {k: declared_field(v) for k, v in fields.items()} for kind, fields in requests.items()}


def view_traits(view_kind: str) -> list[str]:
    """The traits a view's class declares: its synced traits, the common ones first (a composite carries them)."""
    cls = VIEW_CLASSES[view_kind]
    own = [n for n in cls.class_traits(sync=True) if n not in anywidget.AnyWidget.class_traits(sync=True)
           and n not in COMMON_TRAITS]
    return [*COMMON_TRAITS, *own]


PROTOCOL_ABOUT = [
    "Generated from the view classes (python -m interplab.views): do not edit. The messages between each view",
    "(js/src/views/<kind>.js) and its widget class (interplab/views/<kind>.py, REQUESTS and MESSAGES): Python",
    "(widgets/base.py) validates requests against the class, the bundle (js/src/protocol.js) checks them against this",
    "file before sending. Requests travel frontend -> kernel as {type, id, ...fields}; id increases per view; the",
    "kernel answers each with exactly one {type: 'reply', id, ok: true} or {type: 'reply', id, ok: false, error}.",
    "A field is 'int', 'number' (finite), 'bool', 'string' (a trailing '?' makes it optional) or a list: one of",
    "these strings. Ranges that depend on the current state (row < rows, alpha in the slider's range, an edit id",
    "that exists) are checked by the widget class. Traits travel kernel -> frontend only: the frontend never sets",
    "one; to change state it sends a request and Python sets the traits. 'messages' are kernel -> frontend custom",
    "messages, one way (no id, no reply): {type, ...fields}, e.g. a sweep's new cells without the whole grid.",
    "A 'composite' is one model that shows several views (its 'parts', e.g. heatmap + logits): each part's traits",
    "are the composite's '<part>.<trait>' traits, each message between a part and the kernel (request, reply,",
    "'cells') carries one more field, 'part': the part's name, and is otherwise the part's view's own message.",
]


def protocol() -> dict:
    """The declaration of every view class defined so far, as protocol.json holds it (import interplab.views first
    to have them all)."""
    views = {}
    for kind in sorted(VIEW_CLASSES):
        cls = VIEW_CLASSES[kind]
        view = {"requests": cls.REQUESTS}
        if cls.MESSAGES:
            view["messages"] = cls.MESSAGES
        view["traits"] = view_traits(kind)[len(COMMON_TRAITS):]
        views[kind] = view
    return {"about": PROTOCOL_ABOUT, "common_traits": list(COMMON_TRAITS), "views": views}


def _request_id(msg: Any) -> int | None:
    """The id a reply answers: the request's own when it is an integer, else None (the frontend ignores that)."""
    rid = msg.get("id") if isinstance(msg, Mapping) else None
    return rid if isinstance(rid, int) and not isinstance(rid, bool) else None


# ---------------------------------------------------------------------------------------------- the widget code
ESM_ENV = "INTERPLAB_WIDGET_CODE"  # "shared" | "inline" (unset: shared, inline under marimo)


class BundleHolder(ipywidgets.Widget):
    """The widget code, synced once per kernel: a plain model (no view) whose ``code`` trait is static/widgets.js.
    Every view's ``_bundle`` trait references it ("IPY_MODEL_<id>"); the loader (static/loader.js) gets it from the
    page's widget manager and imports the code once per page, cached under ``hash`` (versions never mix)."""

    code = t.Unicode("").tag(sync=True)
    hash = t.Unicode("").tag(sync=True)


def compact_js(text: str) -> str:
    """The loader as each view carries it: without its comment lines, blank lines and indentation (a saved notebook
    stores it once per view). Line breaks stay, so no statement runs into the next."""
    lines = (line.strip() for line in text.splitlines())
    return "\n".join(line for line in lines if line and not line.startswith("//"))


class _Code:
    """static/widgets.js and the loader that imports it, re-read when the file changes (a rebuild while a kernel
    runs gets a new holder: its hash differs)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.stamp: tuple[int, int] | None = None
        self.bundle = self.hash = self.loader = ""
        self.holder: BundleHolder | None = None

    def current(self) -> None:
        st = BUNDLE.stat()
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp != self.stamp:
            self.bundle = BUNDLE.read_text(encoding="utf-8")
            self.hash = hashlib.sha256(self.bundle.encode("utf-8")).hexdigest()[:16]
            self.loader = compact_js(LOADER.read_text(encoding="utf-8")).replace("__INTERPLAB_BUNDLE_HASH__", self.hash)
            self.stamp = stamp


_CODE = _Code()


def bundle_holder() -> BundleHolder:
    """The kernel's one BundleHolder, made on first use and again when it was closed (``Widget.close_all()``) or
    the bundle file changed."""
    with _CODE.lock:
        _CODE.current()
        h = _CODE.holder
        if h is None or h.comm is None or h.hash != _CODE.hash:
            h = _CODE.holder = BundleHolder(code=_CODE.bundle, hash=_CODE.hash)
        return h


def _holder_to_json(holder: BundleHolder | None, widget: Any) -> str:
    """A view's ``_bundle`` as the page reads it. A holder closed since the view was made (a ``close()`` on it
    alone) names the live one: the view's state still serializes, and the page still finds the code."""
    if holder is None or holder.comm is None:
        holder = bundle_holder()
    return "IPY_MODEL_" + holder.model_id


def _in_marimo() -> bool:
    mo = sys.modules.get("marimo")
    if mo is None:
        return False
    try:
        return bool(mo.running_in_notebook())
    except Exception:  # noqa: BLE001 - an older or partial marimo: it is imported, so assume it runs us
        return True


def esm_mode() -> str:
    """"shared" (Jupyter, VS Code, nbconvert: the loader + one BundleHolder) or "inline" (every view carries the
    whole bundle as its _esm: marimo, whose anywidget models have no widget manager to find a shared model).
    INTERPLAB_WIDGET_CODE=shared|inline overrides the choice."""
    forced = os.environ.get(ESM_ENV, "").strip().lower()
    if forced in ("shared", "inline"):
        return forced
    return "inline" if _in_marimo() else "shared"


# ---------------------------------------------------------------------------------------------- the base widget
Limits = Mapping[str, Mapping[str, Field]]


_WITH_COMM: weakref.WeakSet = weakref.WeakSet()  # the widgets a page shows (parts travel in their composite)


def resend_states() -> int:
    """Send every shown widget's whole state again (as a trait update); returns how many. What a notebook saver
    that heard only some updates (nbclient drops those a worker sent between cells) needs to save the last one."""
    sent = 0
    for w in list(_WITH_COMM):
        if getattr(w, "comm", None) is not None:
            w.send_state()
            sent += 1
    return sent


class LabWidget(Part, anywidget.AnyWidget):
    """Base class: `_view_kind` picks the view in the shared bundle (js/src/views/<kind>.js); REQUESTS and MESSAGES
    declare its messages, its synced traits its state (protocol.json is generated from them); `status` and
    `error` are shown by every view. Built with ``part=True`` it opens no comm: a Composite carries it (parts.py)."""

    _view_kind = t.Unicode("").tag(sync=True)
    status = t.Unicode("").tag(sync=True)
    error = t.Unicode("").tag(sync=True)
    REQUESTS: dict = {}  # {type: {field: spec}}: the requests the page may send (see declared_field)
    MESSAGES: dict = {}  # {type: {field: spec}}: custom messages the kernel sends the page (no reply)

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        own = cls.__dict__.get("_view_kind")  # a class that names its own kind is that view's (subclasses are not)
        if own is not None and own.default_value:
            VIEW_CLASSES[own.default_value] = cls

    def __init__(self, **kwargs: Any):
        self._add_code_traits(kwargs)
        super().__init__(**kwargs)
        self._callbacks: dict[str, list[Callable[..., Any]]] = defaultdict(list)
        self._message_error = ""  # the last error text we set ourselves (cleared by the next good message)
        self._test_ids = itertools.count(-1, -1)  # negative: never an id the frontend is waiting for
        self._last_reply: dict[str, Any] | None = None
        self.on_msg(self._on_frontend_msg)
        if getattr(self, "comm", None) is not None:
            _WITH_COMM.add(self)

    def _add_code_traits(self, kwargs: dict[str, Any]) -> None:
        """_esm (and _bundle), per instance as anywidget adds its _esm, so the class traits stay the declared ones.
        Added before the comm opens (traitlets' add_traits: ipywidgets' own would send them down no comm yet)."""
        if esm_mode() == "shared":
            kwargs.setdefault("_bundle", bundle_holder())
            traits = {"_esm": t.Unicode(_CODE.loader).tag(sync=True),
                      "_bundle": t.Instance(BundleHolder, allow_none=True).tag(
                          sync=True, to_json=_holder_to_json, from_json=ipywidgets.widget_serialization["from_json"])}
        else:
            with _CODE.lock:
                _CODE.current()
            traits = {"_esm": t.Unicode(_CODE.bundle).tag(sync=True)}
        t.HasTraits.add_traits(self, **traits)
        self.keys.extend(name for name in traits if name not in self.keys)

    # -- to override ---------------------------------------------------------------------------------------------
    def _limits(self) -> Limits:
        """{request type: {field: checker}}: the checks that follow the current traits (row < rows, an edit id that
        exists), run after the declared type check; computed per request."""
        return {}

    def _callback_kwargs(self, kind: str, fields: dict[str, Any]) -> dict[str, Any]:
        """The keyword arguments callbacks get: the request's fields."""
        return fields

    # -- callbacks -----------------------------------------------------------------------------------------------
    def _register(self, kind: str, fn: Callable[..., Any], remove: bool = False) -> Callable[..., Any]:
        if kind not in declared_requests(self._view_kind):
            raise ValueError(f"the {self._view_kind!r} view declares no {kind!r} request (its REQUESTS)")
        if not callable(fn):
            raise TypeError(f"on_{kind} needs a callable, got {type(fn).__name__}")
        if remove:
            if fn in self._callbacks[kind]:
                self._callbacks[kind].remove(fn)
        else:
            self._callbacks[kind].append(fn)
        return fn

    # -- message path --------------------------------------------------------------------------------------------
    def _validate(self, msg: Any) -> tuple[str, dict[str, Any]]:
        if not isinstance(msg, Mapping):
            raise MessageError(f"expected an object with a 'type', got {type(msg).__name__} {_short(msg)}")
        requests = declared_requests(self._view_kind)
        kind = msg.get("type")
        if kind is None:
            raise MessageError(f"missing 'type' (allowed: {', '.join(requests) or 'none'}) in {_short(dict(msg))}")
        if not isinstance(kind, str) or kind not in requests:
            raise MessageError(f"unknown message type {_short(kind)} (allowed: {', '.join(requests) or 'none'})")
        if "id" not in msg:
            raise MessageError(f"{kind!r} message is missing the field 'id'")
        Int().check("id", msg["id"])
        fields = requests[kind]
        extra = sorted(str(k) for k in msg if k not in ("type", "id") and k not in fields)
        if extra:
            raise MessageError(f"{kind!r} message has unexpected field(s) {', '.join(extra)}")
        limits = self._limits().get(kind, {})
        out: dict[str, Any] = {}
        for key, checker in fields.items():
            if key not in msg:
                if checker.optional:
                    continue
                raise MessageError(f"{kind!r} message is missing the field {key!r}")
            out[key] = checker.check(key, msg[key])
            if key in limits:
                out[key] = limits[key].check(key, out[key])
        return kind, out

    def _on_frontend_msg(self, _widget: Any, content: Any, _buffers: Any = None) -> None:
        # anywidget's own RPC ("anywidget-command") is handled by anywidget itself
        if isinstance(content, Mapping) and content.get("kind") == "anywidget-command":
            return
        error = self._answer(content)
        reply: dict[str, Any] = {"type": "reply", "id": _request_id(content), "ok": not error}
        if error:
            reply["error"] = error
        self._last_reply = reply
        try:
            self.send(reply)
        except Exception:  # noqa: BLE001 - never raise into the comm handler
            log.exception("interplab widget: sending the reply to request %r failed", reply["id"])

    def _answer(self, content: Any) -> str:
        """Validate and handle one request; returns "" or the error text its reply carries."""
        try:
            kind, fields = self._validate(content)
        except MessageError as e:
            return self._set_message_error(BAD_MESSAGE + str(e))
        except Exception as e:  # noqa: BLE001 - never raise into the comm handler
            return self._set_message_error(BAD_MESSAGE + f"{type(e).__name__}: {e}")
        if self._message_error and self.error == self._message_error:
            self.error = ""
        self._message_error = ""
        return self.handle(kind, fields)

    def handle(self, kind: str, fields: dict[str, Any]) -> str:
        """Run the widget's own reaction (``_handle_<kind>``) then the registered callbacks; never raises. The
        trait changes they make go back to the frontend as one message (before the reply). Returns "" or the
        error text."""
        with self.hold_sync():
            errors = self._handle(kind, fields)
            if errors:
                self._set_message_error("\n".join(errors))
        return "\n".join(errors)

    def _handle(self, kind: str, fields: dict[str, Any]) -> list[str]:
        own = getattr(self, f"_handle_{kind}", None)
        try:
            if own is not None:
                own(**fields)
        except Exception as e:  # noqa: BLE001
            log.exception("interplab widget: handling %r failed", kind)
            return [f"error while handling {kind!r}: {type(e).__name__}: {e}"]
        errors = []
        for fn in list(self._callbacks.get(kind, ())):
            try:
                fn(**self._callback_kwargs(kind, fields))
            except Exception as e:  # noqa: BLE001
                log.exception("interplab widget: on_%s callback failed", kind)
                name = getattr(fn, "__name__", repr(fn))
                errors.append(f"error in on_{kind} callback {name}: {type(e).__name__}: {e}")
        return errors

    def _set_message_error(self, text: str) -> str:
        self._message_error = text
        self.error = text
        return text

    def send_test_message(self, msg: Any) -> dict[str, Any] | None:
        """Feed a request as if the frontend had sent it (tests, scripted demos); one without an id gets one.
        Returns its reply (None for anywidget's own commands, which get none from us)."""
        if isinstance(msg, Mapping) and "id" not in msg and msg.get("kind") != "anywidget-command":
            msg = {**msg, "id": next(self._test_ids)}
        self._last_reply = None
        self._handle_custom_msg(msg, [])
        return self._last_reply
