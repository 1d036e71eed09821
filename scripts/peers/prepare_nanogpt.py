#!/usr/bin/env python3
"""A nanoGPT-style `prepare.py`, the peer of `zephon-bench prepare`.

Reads every `*.jsonl` shard of CORPUS (sorted by name) for its `text`
field, tokenizes with the Hugging Face `tokenizers` library's
`encode_batch` (its own thread pool, all cores), appends the end-of-text
id after each document and writes the ids as `uint16` with NumPy to OUT,
as nanoGPT's `data/openwebtext/prepare.py` does. Prints one JSON line:
system, tokens, seconds (from start to the file written), tokens_per_s.

    python3 scripts/peers/prepare_nanogpt.py CORPUS TOKENIZER_JSON OUT

Needs `pip install tokenizers numpy`.
"""

import glob
import json
import os
import sys
import time

import numpy as np
from tokenizers import Tokenizer


def main() -> None:
    corpus, tokenizer_path, out = sys.argv[1:4]
    start = time.perf_counter()
    tok = Tokenizer.from_file(tokenizer_path)
    eos = tok.token_to_id("<|endoftext|>")
    if eos is None:
        sys.exit("the tokenizer has no <|endoftext|> token")
    chunks = []
    total = 0
    for path in sorted(glob.glob(os.path.join(corpus, "*.jsonl"))):
        with open(path, encoding="utf-8") as f:
            texts = [json.loads(line)["text"] for line in f if line.strip()]
        for i in range(0, len(texts), 1024):
            for enc in tok.encode_batch(texts[i : i + 1024], add_special_tokens=False):
                ids = enc.ids
                ids.append(eos)
                total += len(ids)
                chunks.append(np.array(ids, dtype=np.uint16))
    arr = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.uint16)
    arr.tofile(out)
    seconds = time.perf_counter() - start
    print(
        json.dumps(
            {
                "system": "nanogpt_prepare",
                "tokens": total,
                "seconds": round(seconds, 3),
                "tokens_per_s": round(total / seconds),
            }
        )
    )


if __name__ == "__main__":
    main()
