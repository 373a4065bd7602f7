"""A second device on a CPU-only machine, for finding tensors left on the host while the model is elsewhere.

    with FakeDevice(lab.model) as fake:
        lab.patch_sweep(...)          # raises as CUDA would if an op mixes the model's device with the host

The model's parameters and buffers are *tagged* as living on `cuda:0`; everything still computes on the CPU, so
every number is the CPU's. A torch function mode follows the tag the way CUDA follows real placement:

- `tensor.device` (and `is_cuda`) reports `cuda:0` for a tagged tensor, so code that asks a tensor or the model
  where it lives gets the device it would get on a GPU and passes it on (`device=`, `.to(...)`);
- a tensor made with `device=` the fake device is tagged; made without one (torch.zeros, torch.tensor, arange...)
  it is on the host, as with torch's default device; `*_like` and `new_*` follow their input;
- `.to(fake)` / `.cuda()` tag a copy, `.cpu()` / `.to("cpu")` untag a copy; the result of any other op is tagged
  when one of its tensor arguments is;
- an op given a tagged tensor and a host tensor with more than zero dimensions raises CUDA's own error, "Expected
  all tensors to be on the same device", except where CUDA allows it: copies (`copy_`, item assignment), host
  index tensors when indexing a device tensor, `torch.autograd.grad`; `.numpy()` of a tagged tensor raises as it
  does on CUDA;
- `moved` lists every copy from the device to the host (`.cpu()`, `.to("cpu")`, `.tolist()`, `.item()`): its shape
  and bytes, for tests that count what a click copies;
- `waits` names every op where the host waits for the device: those copies, and what reads a device tensor's value
  into Python or sizes a result by it (`torch.equal`, `bool`/`int`/`float` of a tensor, `nonzero`). Each one
  stops a GPU's queue from running ahead of Python, so a sweep should make few, whatever its number of cells.

What this cannot see: anything C++ does inside one op (it runs on the CPU), CUDA numerics, kernels that exist on one
device only, memory. It sees every op reached from Python, which is where a tensor left on the host shows up.
"""

from __future__ import annotations

import contextlib
import traceback

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

FAKE = torch.device("cuda", 0)
_TAG = "_fake_device_tag"

_DEVICE_GET = torch._C.TensorBase.device  # property getters reach the mode as these descriptors' __get__
_IS_CUDA_GET = torch._C.TensorBase.is_cuda
_GRAD_GET = torch._C.TensorBase.grad
_COPIES = {torch.Tensor.copy_, torch.Tensor.__setitem__}
_INDEXING = {torch.Tensor.__getitem__, torch.Tensor.index_select}
_WAITS = {torch.equal, torch.Tensor.__bool__, torch.Tensor.__int__, torch.Tensor.__float__, torch.Tensor.__index__,
          torch.nonzero, torch.Tensor.nonzero, torch.masked_select, torch.Tensor.masked_select}


def tagged(t) -> bool:
    return isinstance(t, torch.Tensor) and getattr(t, _TAG, False)


def _tag(out, on: bool):
    for t in tree_flatten(out)[0]:
        if isinstance(t, torch.Tensor):
            try:
                setattr(t, _TAG, on)
            except (AttributeError, RuntimeError):
                pass
    return out


def _is_fake(device) -> bool:
    if device is None:
        return False
    if isinstance(device, int):
        return True  # torch reads a bare int as a CUDA index
    return torch.device(device).type == "cuda"


class DeviceMix(RuntimeError):
    pass


class FakeDevice(TorchFunctionMode):
    """Tag `model` as living on cuda:0 while it computes on the CPU (see the module docstring). `violations` lists
    (op, where) of every op that would have failed on CUDA; the first one is also raised, as CUDA would."""

    def __init__(self, *models: torch.nn.Module):
        super().__init__()
        self.models = models
        self.violations: list[tuple[str, str]] = []
        self.moved: list[tuple[tuple, int]] = []  # (shape, bytes) of every tensor copied from the device to the host
        self.waits: list[str] = []  # every op that made the host wait for the device (see the module docstring)
        self._patched = contextlib.ExitStack()

    def __enter__(self):
        for model in self.models:
            for t in list(model.parameters()) + list(model.buffers()):
                setattr(t, _TAG, True)
        # torch.cuda's queries, answered as a big free GPU would (nothing here has one)
        gib = 1 << 30
        for name, value in (("mem_get_info", lambda *a, **k: (60 * gib, 80 * gib)),
                            ("synchronize", lambda *a, **k: None), ("empty_cache", lambda *a, **k: None),
                            ("max_memory_allocated", lambda *a, **k: 0), ("memory_allocated", lambda *a, **k: 0),
                            ("reset_peak_memory_stats", lambda *a, **k: None)):
            self._patched.enter_context(_patch(torch.cuda, name, value))
        return super().__enter__()

    def __exit__(self, *exc):
        out = super().__exit__(*exc)
        self._patched.close()
        for model in self.models:
            for t in list(model.parameters()) + list(model.buffers()):
                with contextlib.suppress(AttributeError):
                    delattr(t, _TAG)
        return out

    def _moved(self, t: torch.Tensor) -> None:
        self.moved.append((tuple(t.shape), t.numel() * t.element_size()))
        self.waits.append("copy to host")

    def _fail(self, name: str, what: str):
        where = "".join(traceback.format_list([f for f in traceback.extract_stack()[:-2]
                                               if "interplab" in f.filename or "/tests/" in f.filename][-6:]))
        self.violations.append((name, where))
        raise DeviceMix(f"{what} (fake device, op {name})\n{where}")

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        name = getattr(func, "__name__", str(func))
        prop = getattr(func, "__self__", None) if name == "__get__" else None
        if prop is _DEVICE_GET:
            return FAKE if tagged(args[0]) else func(*args)
        if prop is _IS_CUDA_GET:
            return tagged(args[0])
        if prop is _GRAD_GET:
            return _tag(func(*args), tagged(args[0]))
        if func in (torch.Tensor.numpy, torch.Tensor.__array__) and tagged(args[0]):
            self._fail(name, "can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor "
                             "to host memory first.")
        if func in (torch.Tensor.tolist, torch.Tensor.item) and tagged(args[0]):
            self._moved(args[0])
        if func in _WAITS and any(tagged(t) for t in args if isinstance(t, torch.Tensor)):
            self.waits.append(name)
        if func is torch.Tensor.to:
            return self._to(args, kwargs)
        if func is torch.Tensor.cuda:
            return _tag(args[0].clone(), True) if not tagged(args[0]) else args[0]
        if func is torch.Tensor.cpu:
            if tagged(args[0]):
                self._moved(args[0])
                return _tag(args[0].clone(), False)
            return args[0]
        if func is torch.Tensor.type_as:
            out = func(*args, **kwargs)
            if tagged(args[1]) != tagged(out):
                out = _tag(out.clone() if out is args[0] else out, tagged(args[1]))
            return out
        if func is torch.autograd.grad:
            out = func(*args, **kwargs)
            inputs = kwargs.get("inputs", args[1] if len(args) > 1 else None)
            inputs = [inputs] if isinstance(inputs, torch.Tensor) else list(inputs)
            for g, i in zip(out, inputs):
                _tag(g, tagged(i))
            return out
        if "device" in kwargs:  # a factory (or a *_like / new_* given a device): made where it says
            fake = _is_fake(kwargs["device"])
            kwargs["device"] = None if fake else kwargs["device"]
            return _tag(func(*args, **kwargs), fake)
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        on_dev = [t for t in tensors if tagged(t)]
        if on_dev and func not in _COPIES and func is not torch.autograd.backward:
            host = [t for t in tensors if not tagged(t) and t.dim() > 0]
            if func in _INDEXING and tagged(args[0]):
                host = []  # host index tensors are allowed for a device tensor
            elif func is torch.Tensor.__getitem__:
                host = [args[0]] if not tagged(args[0]) else []
            if host:
                self._fail(name, "Expected all tensors to be on the same device, but found at least two devices, "
                                 "cuda:0 and cpu!")
        out = func(*args, **kwargs)
        if func in _COPIES:
            return out
        if on_dev or (name.startswith("new_") and tagged(args[0])):
            _tag(out, True)
        return out

    def _to(self, args, kwargs):
        self_ = args[0]
        device, dtype, target = kwargs.pop("device", None), kwargs.pop("dtype", None), None
        flags = []
        for a in args[1:]:
            if isinstance(a, torch.dtype):
                dtype = a
            elif isinstance(a, (torch.device, str)) or (isinstance(a, int) and not isinstance(a, bool)):
                device = a
            elif isinstance(a, torch.Tensor):
                target, dtype = a, a.dtype
            else:
                flags.append(a)  # non_blocking, copy
        fake_target = tagged(target) if target is not None else (
            _is_fake(device) if device is not None else tagged(self_))
        real = {"dtype": dtype} if dtype is not None else {}
        if device is not None and not _is_fake(device):
            real["device"] = device
        out = torch.Tensor.to(self_, **real, **dict(zip(("non_blocking", "copy"), flags)), **kwargs)
        if fake_target != tagged(self_):  # a move: a new tensor, as a real copy between devices would be
            if tagged(self_):
                self._moved(out)
            out = out.clone() if out is self_ else out
            _tag(out, fake_target)
        elif out is not self_:
            _tag(out, fake_target)
        return out


@contextlib.contextmanager
def _patch(obj, name, value):
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)
