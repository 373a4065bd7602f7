"""interplab: click to patch, ablate and steer inside language models, from a Jupyter notebook."""

# compat first: it hides CUDA builds of torchvision & co. that cannot load beside a CPU torch (see its docstring)
from . import compat  # noqa: F401

# isort: split
from . import analyses, zoo  # noqa: F401 (every analysis: ilab.analyses.<module>.<function>(lab, ...))
from .analyses.attention_attribution import QKAttribution
from .analyses.feature_stats import FeatureStats
from .analyses.graph import AttributionGraph
from .analyses.patching import SweepCancelled, SweepResult
from .analyses.steering import ban_expert, ban_token, force_token
from .analyses.vectors import SteeringVector
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
from .engine import Generation, attached_hooks
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
from .metrics import AnswerSpaceWarning, logit_diff, logprob, prob
from .sae import SAE
from .sites import SITE_NAMES
from .transcoders import CrossLayerTranscoder, Transcoder, Transcoders

__version__ = "0.1.0"

__all__ = [
    "Lab", "Run", "Edit", "SITE_NAMES", "settle", "SAE", "Transcoder", "Transcoders", "CrossLayerTranscoder",
    "AttributionGraph",
    "FeatureStats", "QKAttribution",
    "patch", "zero", "mean_ablate", "scale", "steer", "project", "clamp", "set_value",
    "edits_to_json", "edits_from_json",
    "logit_diff", "prob", "logprob", "AnswerSpaceWarning", "SweepResult", "SweepCancelled", "attached_hooks",
    "ban_token", "force_token", "ban_expert", "Generation", "SteeringVector", "analyses", "zoo",
    "InterplabError", "UnknownSiteError", "UnsupportedSiteError", "OutOfRangeError", "LengthMismatchError",
    "MultiTokenAnswerError", "VectorError", "EmptyPromptError", "LoadError", "ContextLengthError", "NumberError",
    "UnknownTokenError",
]
