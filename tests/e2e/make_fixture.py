"""Writes ioi_fixture.ipynb (run once; the notebook is committed): the e2e test's stand-in until
notebooks/01_ioi_patching.ipynb exists."""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from harness import write_notebook  # noqa: E402

CELLS = [
    '''import interplab as ilab

try:
    lab = ilab.Lab.load("ioi-tiny")          # the embedded model
except Exception as e:                     # not trained yet: a random GPT-2 with the real tokenizer
    print(f"ioi-tiny unavailable ({type(e).__name__}); using a random gpt2-tiny")
    from interplab.zoo import random_model
    lab = ilab.Lab(*random_model("gpt2-tiny"))''',
    '''clean = "When Mary and John went to the store, John gave a drink to"
corrupt = "When Mary and John went to the store, Mary gave a drink to"
res = lab.patch_sweep(clean, corrupt, site="resid_pre", by=("layer", "pos"),
                      metric=ilab.logit_diff(" Mary", " John"), progress=False)''',
    '''explorer = res.show()
explorer''',
]

if __name__ == "__main__":
    write_notebook(pathlib.Path(__file__).with_name("ioi_fixture.ipynb"), CELLS)
