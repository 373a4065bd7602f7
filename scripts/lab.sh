#!/usr/bin/env bash
# The main job: JupyterLab on the IOI notebook, with the embedded model (offline). Prints the URL.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
. .venv/bin/activate
export HF_HUB_OFFLINE=1
exec python -m interplab lab "$@"
