"""interplab: click to patch, ablate and steer inside language models, from a Jupyter notebook."""

# compat first: it hides CUDA builds of torchvision & co. that cannot load beside a CPU torch (see its docstring)
from . import compat, lens, steering, vectors, zoo  # noqa: F401
from .analyses.attention_attribution import QKAttribution, edge_heads, qk_attribution
from .analyses.feature_stats import FeatureStats, feature_stats
from .analyses.graph import AttributionGraph, attribution_graph
from .analyses.replacement import replacement
from .edits import (
    Edit,
    clamp,
    edits_from_json,
    edits_to_json,
    mean_ablate,
    patch,
    project,
    scale,
    set_value,
    steer,
    zero,
)
from .engine import attached_hooks
from .errors import (
    ContextLengthError,
    EmptyPromptError,
    InterplabError,
    LengthMismatchError,
    LoadError,
    MultiTokenAnswerError,
    NumberError,
    OutOfRangeError,
    UnknownSiteError,
    UnknownTokenError,
    UnsupportedSiteError,
    VectorError,
)
from .lab import Lab, Run, settle
from .metrics import logit_diff, logprob, prob
from .patching import SweepCancelled, SweepResult
from .sae import SAE
from .sites import SITE_NAMES
from .steering import Generation, ban_expert, ban_token, force_token
from .transcoders import Transcoder, Transcoders
from .vectors import SteeringVector

__version__ = "0.1.0"

__all__ = [
    "Lab", "Run", "Edit", "SITE_NAMES", "settle", "SAE", "Transcoder", "Transcoders", "attribution_graph",
    "AttributionGraph", "replacement", "feature_stats", "FeatureStats",
    "edge_heads", "qk_attribution", "QKAttribution",
    "patch", "zero", "mean_ablate", "scale", "steer", "project", "clamp", "set_value",
    "edits_to_json", "edits_from_json",
    "logit_diff", "prob", "logprob", "SweepResult", "SweepCancelled", "attached_hooks",
    "ban_token", "force_token", "ban_expert", "Generation", "SteeringVector", "vectors", "lens", "steering", "zoo",
    "InterplabError", "UnknownSiteError", "UnsupportedSiteError", "OutOfRangeError", "LengthMismatchError",
    "MultiTokenAnswerError", "VectorError", "EmptyPromptError", "LoadError", "ContextLengthError", "NumberError",
    "UnknownTokenError",
]
