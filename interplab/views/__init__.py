"""interplab views: one module per view, each holding the view's widget class (its traits and the requests it
accepts: the declaration), what it shows as plain numbers, and its wiring to the lab's worker. Importing this
package imports every view module in it, so each registers the results it shows (display.register) by itself.

    from interplab.views.heatmap import PatchingHeatmap
    from interplab.views.patching import PatchExplorer, PatchSession
"""

import importlib
import pkgutil

KINDS = sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))
for _kind in KINDS:
    importlib.import_module(f"{__name__}.{_kind}")
