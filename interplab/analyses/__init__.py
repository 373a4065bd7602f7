"""interplab's analyses: one module per analysis, each a plan of edits and reads run on the engine, returning plain
results whose show() opens their view. Importing this package imports every module in it, so a notebook reaches any
analysis as `ilab.analyses.<module>.<function>(lab, ...)` (each takes a Lab or an Engine first: engine_of).

    ilab.analyses.patching.patch_sweep(lab, clean, corrupt, metric=ilab.logit_diff(" Mary", " John"))
    ilab.analyses.vectors.diff_of_means(lab, positive, negative, "resid_post", 1)

The package is one layer of pyproject.toml's import contract: a new module here needs no edit there (and may import
its siblings, never in a cycle: tests/test_architecture.py). It imports only the layers below (engine, edits,
metrics, display, sites, sae), never the widgets, the views or the Lab.
"""

import importlib
import pkgutil

MODULES = sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))
for _module in MODULES:
    importlib.import_module(f"{__name__}.{_module}")
