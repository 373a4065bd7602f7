"""Files of an SAE or a transcoder on the Hugging Face hub: read from the cache, else downloaded once."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import LoadError

CFG_FILE = "cfg.json"


def hub_folder(text: str, path: str | None, revision: str | None, what: str = "SAE") -> Path:
    """The local folder (or file) of a hub SAE (or transcoder: what): from huggingface_hub's cache, else downloaded
    once."""
    repo = text
    if text.startswith("hf://"):
        parts = text[5:].strip("/").split("/")
        if len(parts) < 2:
            raise LoadError(f"{text!r}: write hub {what}s as 'hf://org/repo/folder' or "
                           f"{'SAE' if what == 'SAE' else 'Transcoder'}.load('org/repo', path=...).")
        repo, rest = "/".join(parts[:2]), "/".join(parts[2:])
        path = path or rest or None
    from huggingface_hub import snapshot_download

    patterns = [f"{path}/*", path] if path else None
    what_cls = "SAE" if what == "SAE" else "Transcoder"
    local_hint = (f"Point {what_cls}.load at a local copy instead: where there is network, "
                  f"huggingface_hub.snapshot_download({repo!r}, allow_patterns={patterns!r}, local_dir='saes'), "
                  f"then {what_cls}.load('saes/{path or ''}').")
    try:
        root = snapshot_download(repo, revision=revision, allow_patterns=patterns, local_files_only=True)
    except Exception:  # not cached (huggingface_hub raises several kinds): download it
        if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
            raise LoadError(f"the {what} {repo}/{path or ''} is not in the hub cache and HF_HUB_OFFLINE is set, so it "
                            f"cannot be downloaded. {local_hint}") from None
        try:
            root = snapshot_download(repo, revision=revision, allow_patterns=patterns, etag_timeout=5)
        except Exception as e:  # no network, no such repository, ...
            raise LoadError(f"the {what} {repo}/{path or ''} could not be downloaded from the hub "
                            f"({type(e).__name__}: {str(e)[:200]}). {local_hint}") from None
    where = Path(root) / path if path else Path(root)
    if not where.exists():
        raise LoadError(f"{repo} has no {path!r}: pass path= as the folder inside the repository that holds "
                        f"{CFG_FILE} (or params.npz).")
    return where
