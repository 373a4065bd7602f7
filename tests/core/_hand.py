"""Independent reference: plain PyTorch hooks written by hand, no interplab code path.

`hand_run(model, ids, mask, edits=[(path, io, fn)], capture=[(key, path, io, index)])` registers
`register_forward_hook` / `register_forward_pre_hook` on the named modules, runs the model, removes the hooks and
returns (logits, captured). `fn(t)` returns the new tensor for element 0 of the module's input / output.
"""

from __future__ import annotations

import hashlib

import torch


def _first_tensor_in(args, kwargs):
    if args and isinstance(args[0], torch.Tensor):
        return "arg", args[0]
    return "kw", kwargs["hidden_states"]


def hand_run(model, ids, mask=None, edits=(), capture=()):
    captured: dict = {}
    handles = []
    if mask is None:
        mask = torch.ones_like(ids)

    def add_edit(path, io, fn):
        mod = model.get_submodule(path)
        if io == "output":
            def hook(module, args, output):
                if isinstance(output, torch.Tensor):
                    return fn(output)
                return (fn(output[0]), *output[1:])
            handles.append(mod.register_forward_hook(hook))
        else:
            def pre(module, args, kwargs):
                where, t = _first_tensor_in(args, kwargs)
                if where == "arg":
                    return (fn(t), *args[1:]), kwargs
                return args, {**kwargs, "hidden_states": fn(t)}
            handles.append(mod.register_forward_pre_hook(pre, with_kwargs=True))

    def add_capture(key, path, io, index):
        mod = model.get_submodule(path)
        if io == "output":
            def hook(module, args, output):
                t = output if isinstance(output, torch.Tensor) else output[index]
                captured[key] = t.detach().clone()
            handles.append(mod.register_forward_hook(hook))
        else:
            def pre(module, args, kwargs):
                captured[key] = _first_tensor_in(args, kwargs)[1].detach().clone()
            handles.append(mod.register_forward_pre_hook(pre, with_kwargs=True))

    try:
        for path, io, fn in edits:
            add_edit(path, io, fn)
        for key, path, io, index in capture:  # registered after the edits: sees the edited value
            add_capture(key, path, io, index)
        with torch.no_grad():
            logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits
    finally:
        for h in handles:
            h.remove()
    return logits.detach().float(), captured


def encode(tokenizer, prompt):
    ids = torch.tensor([tokenizer(prompt)["input_ids"]])
    return ids, torch.ones_like(ids)


def param_hash(model) -> str:
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict(keep_vars=True).items()):
        h.update(name.encode())
        h.update(p.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes() if p.dim() else
                 p.detach().cpu().reshape(1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def hooks_everywhere(model) -> list[tuple[str, str, object]]:
    """Every forward / forward-pre hook on every module: (module name, kind, hook)."""
    out = []
    for name, m in model.named_modules():
        for hk in m._forward_hooks.values():
            out.append((name, "forward", hk))
        for hk in m._forward_pre_hooks.values():
            out.append((name, "pre", hk))
    return out
