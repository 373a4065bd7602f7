"""python -m interplab.views: write interplab/widgets/protocol.json from the view classes (then rebuild the bundle:
cd js && npm run build). --check: exit 1, saying what differs, when the file is not what the classes declare."""

import json
import sys

from interplab.views import KINDS  # noqa: F401 (every view module imported: every class declared)
from interplab.widgets.base import PROTOCOL_FILE, protocol


def main(argv: list[str]) -> int:
    text = json.dumps(protocol(), indent=2) + "\n"
    if "--check" in argv:
        if PROTOCOL_FILE.read_text(encoding="utf-8") != text:
            print(f"{PROTOCOL_FILE} is not what the view classes declare: run python -m interplab.views",
                  file=sys.stderr)
            return 1
        return 0
    PROTOCOL_FILE.write_text(text, encoding="utf-8")
    print(f"wrote {PROTOCOL_FILE} ({len(json.loads(text)['views'])} views); now: cd js && npm run build")
    return 0


sys.exit(main(sys.argv[1:]))
