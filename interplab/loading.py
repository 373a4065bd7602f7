"""Loading a model and its tokenizer for the Lab: the embedded ioi-tiny, a Hugging Face hub id or a local folder.

Only safetensors unless allowed, remote code only when trusted, the hub's cache first and a fast, clear failure
offline; placement over devices through accelerate (device_map). Lab.load (interplab.lab) calls `load_pretrained`.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from .engine import device_of, dtype_of
from .errors import LoadError


def load_pretrained(name: str, *, device=None, dtype=None, trust_remote_code: bool = False,
                    allow_pickle: bool = False, attn_implementation: str = "eager", progress: bool = False,
                    device_map=None, offload_folder=None, max_memory=None):
    """(model, tokenizer, name, path, placement): the model on `device` (if given), `name` as the lab will call it,
    `path` the folder or hub id it came from, `placement` from_pretrained's placement keywords (for the log)."""
    import socket
    import threading
    import urllib.parse
    import urllib.request
    import warnings

    from huggingface_hub import constants as hub_constants
    from huggingface_hub import utils as hub_utils
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    if not isinstance(name, (str, os.PathLike)) or not str(name).strip():
        raise LoadError(f"model name must be a non-empty string (a hub id such as 'gpt2', 'ioi-tiny' or a "
                        f"local directory), got {type(name).__name__} {name!r}.")
    name = os.fspath(name)
    dtype_of(dtype)  # an unknown dtype or device says so here, not after the whole model has loaded
    device_of(device)
    placement = _placement(device, device_map, offload_folder, max_memory)
    path = embedded_path(name) or name
    if os.path.isdir(path):
        has_safe = any(Path(path).glob("*.safetensors"))
        has_pickle = any(Path(path).glob("*.bin")) or any(Path(path).glob("*.pt"))
        if not has_safe and has_pickle and not allow_pickle:
            raise LoadError(
                f"{path} holds only pickle weights (*.bin/*.pt), which can run code when loaded. Convert them "
                f"to safetensors, or pass allow_pickle=True if you trust the files."
            )

    def from_pretrained(**online):
        model = AutoModelForCausalLM.from_pretrained(
            path, dtype=load_dtype(dtype, device, device_map, embedded_path(name)), use_safetensors=None if
            allow_pickle else True,
            trust_remote_code=trust_remote_code, attn_implementation=attn_implementation, **placement,
            **online)
        return model, AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code, **online)

    def hub_unreachable() -> str | None:
        """Why the hub cannot be reached (offline mode, or no TCP connection within 1 s), or None. Without
        this, transformers retries for ~30 s before failing."""
        flags = (os.environ.get(v, "").upper() for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))
        if hub_constants.HF_HUB_OFFLINE or any(f in ("1", "ON", "YES", "TRUE") for f in flags):
            return "HF_HUB_OFFLINE is set"
        endpoint = os.environ.get("HF_ENDPOINT") or hub_constants.ENDPOINT
        url = urllib.parse.urlsplit(endpoint)
        proxy = None if urllib.request.proxy_bypass(url.hostname or "") else urllib.request.getproxies().get(
            url.scheme)
        target = urllib.parse.urlsplit(proxy) if proxy else url
        address = (target.hostname, target.port or (443 if target.scheme == "https" else 80))
        ok = []

        def probe():  # in a thread: name resolution has no timeout of its own
            try:
                socket.create_connection(address, timeout=1.0).close()
                ok.append(True)
            except OSError:
                pass

        t = threading.Thread(target=probe, daemon=True)
        t.start()
        t.join(1.0)
        return None if ok else f"{endpoint} cannot be reached (no network?)"

    # Weight-loading bars off unless asked; the hub's download bars keep their own setting.
    quiet = not progress and hf_logging.is_progress_bar_enabled()
    hub_bars_off = hub_utils.are_progress_bars_disabled()
    try:
        if quiet:
            hf_logging.disable_progress_bar()  # (this switches the hub's bars off too: restored next line)
            if not hub_bars_off:
                hub_utils.enable_progress_bars()
        if os.path.isdir(path):
            model, tokenizer = from_pretrained()
        else:
            try:
                model, tokenizer = from_pretrained(local_files_only=True)  # the cache: no network, no wait
            except OSError as cache_miss:
                why = hub_unreachable()
                if why is not None:
                    leaf = name.rstrip("/").split("/")[-1]
                    raise LoadError(
                        f"could not load {name!r}: it is not in the local Hugging Face cache, and {why}.\n"
                        f"How to fix: point the lab at a local directory holding the model (config.json, "
                        f"tokenizer files, *.safetensors): Lab.load('/path/to/{leaf}') (command line: --model "
                        f"/path/to/{leaf}). Make it where there is network, e.g. python -c \"from huggingface_hub "
                        f"import snapshot_download; snapshot_download('{name}', local_dir='{leaf}')\", and copy "
                        f"it over; or load {name!r} once online (it is then cached). Lab.load('ioi-tiny') is "
                        f"the embedded model, always offline.") from cache_miss
                model, tokenizer = from_pretrained()
    except LoadError:
        raise
    except OSError as e:
        offline = os.environ.get("HF_HUB_OFFLINE") == "1" or "offline" in str(e).lower()
        hint = ("you seem to be offline: hub models need a download once (then they are cached); use "
                "Lab.load('ioi-tiny') for the embedded model, or a local directory.") if offline else (
                "check the name (e.g. 'gpt2', 'EleutherAI/pythia-70m') or the directory path.")
        raise LoadError(f"could not load {name!r}: {e}\nHow to fix: {hint}") from e
    except ValueError as e:
        if "trust_remote_code" in str(e):
            raise LoadError(
                f"{name!r} needs custom code from its repository. Read it first; then pass "
                f"trust_remote_code=True if you trust it."
            ) from e
        raise LoadError(f"could not load {name!r}: {e}\nHow to fix: interplab loads causal language models that "
                        f"transformers knows; check the name or the directory's config.json.") from e
    finally:
        if quiet:
            with warnings.catch_warnings():  # (the hub warns if its env var keeps its bars off)
                warnings.simplefilter("ignore")
                hf_logging.enable_progress_bar()
                if hub_bars_off:
                    hub_utils.disable_progress_bars()
    if device is not None:
        model = model.to(device)
    if device is not None:
        model = model.to(device)
    if load_dtype(dtype, device, device_map, embedded_path(name)) == "auto":
        print(f"interplab: {name} loaded in {str(model.dtype).replace('torch.', '')}, the checkpoint's own dtype "
              f"(dtype='float32' for full precision)")
    return model, tokenizer, name, path, placement


def load_dtype(dtype, device, device_map, embedded) -> torch.dtype | str:
    """The dtype from_pretrained loads in: the one asked for; else on a GPU (device or device_map) the checkpoint's
    own ("auto": a bf16 checkpoint takes half the memory of fp32); else float32 (the CPU, and the embedded model,
    whose numbers the tests compare at 1e-5)."""
    if dtype is not None:
        return dtype_of(dtype)
    elsewhere = (device_map is not None and torch.cuda.is_available()) or (
        device is not None and device_of(device).type != "cpu")
    return "auto" if elsewhere and not embedded else torch.float32


BIG = "accelerate>=1.1"  # pyproject.toml's [big] extra (transformers' own minimum)


def _placement(device, device_map, offload_folder, max_memory) -> dict:
    """from_pretrained's placement keywords for a device_map, checked before anything is loaded."""
    if device_map is None:
        if offload_folder is not None or max_memory is not None:
            raise LoadError("offload_folder and max_memory place the layers of a model spread by a device_map: "
                            "pass device_map='auto' (or a dict) too.")
        return {}
    if device is not None:
        raise LoadError(f"device={device!r} and device_map={device_map!r}: give one. device_map places the layers "
                        f"(over devices, the CPU or disk); device moves the whole model to one device.")
    import importlib.metadata

    try:
        version = importlib.metadata.version("accelerate")
    except importlib.metadata.PackageNotFoundError:
        version = None
    major_minor = tuple(int(x) for x in (version or "0.0").split(".")[:2] if x.isdigit())
    if version is None or major_minor < (1, 1):
        have = f"accelerate {version} is too old" if version else "accelerate is not installed"
        raise LoadError(f"device_map={device_map!r} spreads the model through accelerate ({BIG}), and {have}.\n"
                        f"How to fix: pip install 'interplab[big]'")
    out = {"device_map": device_map}
    if offload_folder is not None:
        out["offload_folder"] = os.fspath(offload_folder)
    if max_memory is not None:
        out["max_memory"] = max_memory
    return out


def embedded_path(name: str) -> str | None:
    try:
        from .zoo import EMBEDDED
    except ImportError:
        return None
    p = EMBEDDED.get(name)
    return str(p) if p is not None else None
