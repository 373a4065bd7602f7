"""Files of an SAE or a transcoder on the Hugging Face hub: read from the cache, else downloaded once; and the
SAELens release names (pretrained_saes.yaml) that say which repository and folder an SAE is."""

from __future__ import annotations

import difflib
import functools
import importlib.metadata
import importlib.util
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from .errors import LoadError

CFG_FILE = "cfg.json"


def hub_folder(text: str, path: str | None, revision: str | None, what: str = "SAE",
               load_args: str = "") -> Path:
    """The local folder (or file) of a hub SAE (or transcoder: what): from huggingface_hub's cache, else downloaded
    once. load_args: what the local copy's load call needs besides the folder (", site='resid_post', layer=3")."""
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
                  f"then {what_cls}.load('saes/{path or ''}'{load_args}).")
    try:
        root = snapshot_download(repo, revision=revision, allow_patterns=patterns, local_files_only=True)
        cached = Path(root) / path if path else Path(root)
    except Exception:  # not cached (huggingface_hub raises several kinds)
        cached = None
    if cached is not None and cached.exists():
        return cached
    # not cached, or only other folders of the repository are: download this one
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        raise LoadError(f"the {what} {repo}/{path or ''} is not in the hub cache and HF_HUB_OFFLINE is set, so it "
                        f"cannot be downloaded. {local_hint}")
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


# ---- SAELens releases -------------------------------------------------------------------------------------------
# A release name ('gpt2-small-res-jb') and an sae_id name one SAE of SAELens's pretrained directory: a repository,
# the folder inside it, and how it is stored. Read from sae-lens itself when it is installed (its own table, the
# newest); else from the copy of the common releases shipped beside this module.
RELEASES_FILE = Path(__file__).with_name("saelens_releases.json")
# SAELens's conversion_func values interplab reads: None = SAELens folders (cfg.json + sae_weights.safetensors),
# gemma_2 = Gemma Scope params.npz, llama_scope = Llama Scope folders (hyperparams.json + checkpoints/).
READABLE_CONVERSIONS = (None, "gemma_2", "llama_scope")


@dataclass(frozen=True)
class Release:
    """One SAELens release: where its SAEs live and which table said so."""
    name: str
    repo_id: str
    model: str
    conversion_func: str | None
    saes: dict  # sae_id -> the folder inside repo_id
    norm_scaling_factor: dict  # sae_id -> SAELens's factor for normalize_activations="expected_average_only_in"
    table: str
    # how SAELens loads the model the SAEs were trained on (its config_overrides' model_from_pretrained_kwargs):
    # {"center_writing_weights": True} means TransformerLens's centred residual stream (SAE.center_input)
    model_kwargs: dict  # "sae-lens 6.x" or "interplab's table (sae-lens 6.x)"


@dataclass(frozen=True)
class ReleaseSAE:
    """One SAE of a release: the repository, the folder inside it, and what SAE.load needs to read it."""
    release: Release
    sae_id: str
    folder: str
    hook_name: str | None  # for Gemma Scope folders, whose files do not say where the SAE reads
    norm_scaling_factor: float | None


def release_table() -> dict[str, Release]:
    """Every release name this machine knows: sae-lens's own directory (its packaged pretrained_saes.yaml, read as
    sae_lens.loading.pretrained_saes_directory reads it) when sae-lens is installed, else interplab's copy of the
    common ones. The YAML is read without importing sae_lens, whose import (TransformerLens, ...) takes seconds."""
    spec = importlib.util.find_spec("sae_lens")  # (finds the package; runs none of it)
    for where in (spec.submodule_search_locations or []) if spec else []:
        yaml_file = Path(where) / "pretrained_saes.yaml"
        if yaml_file.is_file():
            try:
                return _saelens_releases(str(yaml_file), yaml_file.stat().st_mtime)
            except ImportError:  # no PyYAML (sae-lens depends on it: a broken install)
                break
    return _shipped_releases()


@functools.cache
def _saelens_releases(yaml_file: str, mtime: float) -> dict[str, Release]:
    import yaml

    with open(yaml_file) as f:
        data = yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    table = f"sae-lens {importlib.metadata.version('sae-lens')}"
    out = {}
    for name, v in data.items():
        saes = v.get("saes") or []
        out[name] = Release(name, v["repo_id"], v["model"], v.get("conversion_func"),
                            {s["id"]: str(s["path"]) for s in saes},
                            {s["id"]: s["norm_scaling_factor"] for s in saes if "norm_scaling_factor" in s}, table,
                            dict((v.get("config_overrides") or {}).get("model_from_pretrained_kwargs") or {}))
    return out


@functools.cache
def _shipped_releases() -> dict[str, Release]:
    data = json.loads(RELEASES_FILE.read_text())
    table = f"interplab's table of common releases (from sae-lens {data['sae_lens_version']})"
    return {name: Release(name, v["repo_id"], v["model"], v.get("conversion_func"), dict(v["saes"]),
                          dict(v.get("norm_scaling_factor", {})), table,
                          dict(v.get("model_from_pretrained_kwargs", {})))
            for name, v in data["releases"].items()}


def near(word: str, words, n: int = 8) -> list[str]:
    """The names closest to word (difflib's ratio), best first; then those that contain it."""
    words = list(words)
    close = difflib.get_close_matches(word, words, n=n, cutoff=0.5)
    return (close + [w for w in words if word.lower() in w.lower() and w not in close])[:n]


def resolve_release(release: str, sae_id) -> ReleaseSAE:
    """The repository and folder of SAELens's (release, sae_id), or a LoadError naming the near releases / ids."""
    table = release_table()
    if release not in table:
        hint = near(release, table)
        raise LoadError(f"{release!r} is not a SAELens release known here ({next(iter(table.values())).table}, "
                        f"{len(table)} releases)" + (f"; near names: {', '.join(hint)}" if hint else "") +
                        ". Give a release and its sae_id (SAE.load('gpt2-small-res-jb', "
                        "sae_id='blocks.8.hook_resid_pre')), a hub repository with path=, or a local folder.")
    rel = table[release]
    ids = list(rel.saes)
    if not isinstance(sae_id, str) or sae_id not in rel.saes:
        first = near(str(sae_id), ids, n=10) if isinstance(sae_id, str) else []
        listed = first + [i for i in ids if i not in first]
        shown = ", ".join(listed[:30]) + (f", ... ({len(ids)} in all)" if len(ids) > 30 else "")
        raise LoadError(f"sae_id={sae_id!r} is not in SAELens release {release!r} ({rel.table}); its sae_ids"
                        f"{' (nearest first)' if first else ''}: {shown}.")
    if rel.conversion_func not in READABLE_CONVERSIONS:
        raise LoadError(f"SAELens release {release!r} is stored in its own format (SAELens converts it with "
                        f"conversion_func {rel.conversion_func!r}), which interplab does not read. Where sae-lens "
                        f"and the network are: sae_lens.SAE.from_pretrained({release!r}, {sae_id!r})"
                        f".save_model('sae_folder'), then SAE.load('sae_folder').")
    folder = rel.saes[sae_id]
    hook = gemma_scope_hook(rel.repo_id, folder) if rel.conversion_func == "gemma_2" else None
    return ReleaseSAE(rel, sae_id, folder, hook, rel.norm_scaling_factor.get(sae_id))


def gemma_scope_hook(repo_id: str, folder: str) -> str:
    """Where a Gemma Scope SAE reads, as SAELens's gemma_2 loader reads it from the repository and folder names:
    '-res' repositories the residual stream after the layer (the embedding folder: hook_embed), '-mlp' the MLP's
    output, '-att' the attention heads' outputs (hook_z)."""
    m = re.search(r"layer_(\d+)", folder)
    if "res" in repo_id and "embedding" in folder:
        return "hook_embed"
    if m is None:
        raise LoadError(f"{repo_id}/{folder}: no layer_N in the folder name, so where the SAE reads is unknown; "
                        f"give site= and layer=.")
    for part, hook in (("res", "hook_resid_post"), ("mlp", "hook_mlp_out"), ("att", "attn.hook_z")):
        if part in repo_id:
            return f"blocks.{m[1]}.{hook}"
    raise LoadError(f"{repo_id}: neither res, mlp nor att in the name, so where its SAEs read is unknown; give site= "
                    f"and layer=.")
