# Each student's Jupyter server in the workshop room. Loaded by jupyterhub_config.py's Spawner.args on one machine;
# on TLJH, install it as /usr/local/etc/jupyter/jupyter_server_config.py (docs/teaching/ROOM.md). It runs as the
# student, when their server starts, whatever started it (local process or systemd spawner, TLJH):
#
# - kernels on private sockets: a kernel's channels are Unix sockets in the student's runtime directory (mode 700),
#   not loopback TCP ports that every account on the machine can connect to (a kernel's output channel, IOPub, needs
#   no key to subscribe: over TCP, any student could read another's code and outputs);
# - the room's notebooks copied into ~/interplab-notebooks, keeping any notebook already there (the student's work);
# - one kernel per student: a kernel holds a model (ioi-tiny: about 0.4 GB with torch; GPT-2: about 1 GB), so a
#   second notebook's kernel doubles what one student costs the room. Starting another kernel while one runs is
#   refused with a message that says what to do; restarting the running kernel is allowed.

import os
import shutil
import sys
from pathlib import Path

from jupyter_core.paths import jupyter_runtime_dir
from jupyter_server.services.kernels.kernelmanager import AsyncMappingKernelManager
from tornado import web

c = get_config()  # noqa: F821 - defined by Jupyter when it loads this file

MAX_KERNELS = int(os.environ.get("INTERPLAB_ROOM_MAX_KERNELS", "1"))
NOTEBOOKS = Path(os.environ.get("INTERPLAB_ROOM_NOTEBOOKS", "/srv/interplab/notebooks"))
NOTEBOOK_DIR = Path.home() / "interplab-notebooks"

# ---- kernels on Unix sockets in a directory only the student can enter ---------------------------------------------
# The kernels' connection files and sockets go in the server's runtime directory (~/.local/share/jupyter/runtime,
# Jupyter's default): made private here even where the home is not (a socket can be reached only through
# directories one may enter).
RUNTIME = Path(jupyter_runtime_dir())
RUNTIME.mkdir(mode=0o700, parents=True, exist_ok=True)
RUNTIME.chmod(0o700)
c.KernelManager.transport = "ipc"

# ---- the notebooks, on every start of the server -------------------------------------------------------------------
if NOTEBOOKS.is_dir():
    NOTEBOOK_DIR.mkdir(exist_ok=True)
    for nb in sorted(NOTEBOOKS.glob("*.ipynb")):
        if not (NOTEBOOK_DIR / nb.name).exists():  # a notebook already there is the student's work: kept
            shutil.copyfile(nb, NOTEBOOK_DIR / nb.name)
else:
    print(f"interplab room: no notebooks in {NOTEBOOKS} (INTERPLAB_ROOM_NOTEBOOKS)", file=sys.stderr)


# ---- one kernel per student ----------------------------------------------------------------------------------------
class RoomKernelManager(AsyncMappingKernelManager):
    async def start_kernel(self, *args, kernel_id=None, **kwargs):
        running = [k for k in self.list_kernel_ids() if k != kernel_id]
        if kernel_id is None and len(running) >= MAX_KERNELS:
            raise web.HTTPError(403, reason=(
                f"This room allows {MAX_KERNELS} running kernel(s) per student. Shut down the other notebook's kernel "
                f"first (Kernel menu > Shut Down Kernel, or the Running tab on the left), then open this one again."))
        return await super().start_kernel(*args, kernel_id=kernel_id, **kwargs)


c.ServerApp.kernel_manager_class = RoomKernelManager
