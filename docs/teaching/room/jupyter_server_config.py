# Each student's Jupyter server in the workshop room (loaded by jupyterhub_config.py's Spawner.args).
#
# One kernel per student: a kernel holds a model (ioi-tiny: about 0.4 GB with torch; GPT-2: about 1 GB), so a second
# notebook's kernel doubles what one student costs the room. Starting another kernel while one runs is refused with
# a message that says what to do; restarting the running kernel is allowed.

import os

from jupyter_server.services.kernels.kernelmanager import AsyncMappingKernelManager
from tornado import web

c = get_config()  # noqa: F821 - defined by Jupyter when it loads this file

MAX_KERNELS = int(os.environ.get("INTERPLAB_ROOM_MAX_KERNELS", "1"))


class RoomKernelManager(AsyncMappingKernelManager):
    async def start_kernel(self, *args, kernel_id=None, **kwargs):
        running = [k for k in self.list_kernel_ids() if k != kernel_id]
        if kernel_id is None and len(running) >= MAX_KERNELS:
            raise web.HTTPError(403, reason=(
                f"This room allows {MAX_KERNELS} running kernel(s) per student. Shut down the other notebook's kernel "
                f"first (Kernel menu > Shut Down Kernel, or the Running tab on the left), then open this one again."))
        return await super().start_kernel(*args, kernel_id=kernel_id, **kwargs)


c.ServerApp.kernel_manager_class = RoomKernelManager
