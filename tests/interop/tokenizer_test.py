#!/usr/bin/env python3
"""ftrain-prep's byte-level BPE against Hugging Face `tokenizers` (issue 21 part 5).

    tokenizer_test.py --prep FTRAIN_PREP --workdir DIR

Builds a Llama 3-shaped BPE with `tokenizers` (llama3_bpe_fixture.py: Llama 3's
split regex and special tokens, ignore_merges, trained here on a multilingual
corpus), then for each variant of it

  llama3          the file as `tokenizers` saves it (merges as [a, b] lists)
  merge_strings   the same with merges as "a b" strings (Meta's file's form)
  whole_pieces    whole pre-tokenizer pieces added to the vocabulary without
                  merges, with ignore_merges on (each is one token) and off
                  (merged from bytes): the file where the flag matters
  gpt2_regex      a ByteLevel pre-tokenizer with GPT-2's regex, no bos
  tiktoken        a tiktoken rank file of the same vocabulary (what Meta ships
                  as original/tokenizer.model), judged against the tokenizer.json
                  transformers' TikTokenConverter makes of it
  meta_llama3     only with FTRAIN_LLAMA3_TIKTOKEN=PATH: Meta's real rank file
                  (e.g. from the llama-models wheel), the same way, plus
                  llama-models' own test vector

writes hundreds of texts (code, CJK, emoji, whitespace runs, long numbers,
contractions, special tokens, random code points) as JSON lines, runs
`ftrain-prep text --tokenizer FILE --jsonl`, reads the token file and
requires every document's ids to equal `Tokenizer.encode(text).ids` exactly
(bos included; the eos is the writer's, after each document).
"""
import argparse
import base64
import contextlib
import json
import os
import struct
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from ftrain_test import fail  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama3_bpe_fixture as fixture  # noqa: E402



@contextlib.contextmanager
def quiet_output():
    """Silences the process's stdout and stderr (file descriptors 1 and 2, where Rust prints)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 1)
        os.dup2(null.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


def read_token_file(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"FTRNTOK1":
        fail(f"{path}: not a token file")
    _version, token_bytes, n_tokens, vocab, eos, n_docs = struct.unpack_from("<IIQQQQ", data, 8)
    fmt = {2: "H", 4: "I"}[token_bytes]
    tokens = struct.unpack_from(f"<{n_tokens}{fmt}", data, 64)
    docs, current = [], []
    for t in tokens:
        if t == eos:
            docs.append(current)
            current = []
        else:
            current.append(t)
    if current or len(docs) != n_docs:
        fail(f"{path}: {len(docs)} documents ending in eos, header says {n_docs}")
    return {"token_bytes": token_bytes, "vocab": vocab, "eos": eos, "docs": docs}


def write_rank_file(spec, path):
    """The trained vocabulary (specials excluded) as a tiktoken rank file: rank = id."""
    alphabet = {c: b for b, c in enumerate(byte_alphabet())}
    ranks = {bytes(alphabet[c] for c in token): i for token, i in spec["model"]["vocab"].items()
             if i < fixture.FIRST_SPECIAL}
    if sorted(ranks.values()) != list(range(len(ranks))):
        fail("the trained vocabulary's ids are not 0..N-1, cannot be ranks")
    with open(path, "w") as f:
        for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
            f.write(f"{base64.b64encode(token).decode()} {rank}\n")


def oracle_for_rank_file(path, spec):
    """The tokenizer.json transformers' TikTokenConverter makes of a rank file
    (its generate_merges, restated: every split of every token into two
    tokens, ordered by the merged token's rank, then the parts' ranks), with
    the Llama 3 pre-tokenizer and template of `spec` and Meta's special tokens
    after the ranks."""
    from tokenizers import Tokenizer
    ranks = {}
    for line in open(path):
        if line.strip():
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    n = len(ranks)
    merges = []
    for token, rank in ranks.items():
        local = [(token[:k], token[k:], rank) for k in range(1, len(token)) if token[:k] in ranks and token[k:] in ranks]
        merges.extend(sorted(local, key=lambda m: (ranks[m[0]], ranks[m[1]])))
    merges.sort(key=lambda m: m[2])
    unmap = byte_alphabet()
    spell = lambda b: "".join(unmap[x] for x in b)  # noqa: E731
    oracle = json.loads(json.dumps(spec))
    oracle["model"]["vocab"] = {spell(t): r for t, r in ranks.items()}
    oracle["model"]["merges"] = [[spell(a), spell(b)] for a, b, _ in merges]
    oracle["model"]["ignore_merges"] = True
    oracle["added_tokens"] = [{"id": n + i, "content": name, "single_word": False, "lstrip": False, "rstrip": False,
                               "normalized": False, "special": True}
                              for i, name in enumerate(fixture.llama3_special_tokens())]
    template = oracle["post_processor"]["processors"][1]
    template["special_tokens"]["<|begin_of_text|>"]["ids"] = [n]
    hf = Tokenizer.from_str(json.dumps(oracle))
    if hf.token_to_id("<|end_of_text|>") != n + 1:
        fail("oracle for the rank file: special tokens not at N..N+255")
    return hf


def byte_alphabet():
    """GPT-2's bytes_to_unicode as a list indexed by byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs))
    return [chr(table[b]) for b in range(256)]


def compare(name, prep, tokenizer_path, hf, texts, workdir, expect_bos, eos_text="<|end_of_text|>"):
    docs_in = [t for t in texts if t and eos_text not in t]
    jsonl = os.path.join(workdir, f"{name}.jsonl")
    with open(jsonl, "w", encoding="utf-8") as f:
        for t in docs_in:
            f.write(json.dumps({"text": t}) + "\n")
    out = os.path.join(workdir, f"{name}.tok")
    r = subprocess.run([prep, "text", "--out", out, "--tokenizer", tokenizer_path, "--jsonl", jsonl],
                       capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"{name}: ftrain-prep failed ({r.returncode}): {r.stdout}{r.stderr}")
    if "byte-level BPE" not in r.stdout:
        fail(f"{name}: ftrain-prep did not use the byte-level BPE: {r.stdout}")
    got = read_token_file(out)
    want_vocab = max(hf.get_vocab().values()) + 1
    if got["vocab"] != want_vocab or got["eos"] != hf.token_to_id(eos_text):
        fail(f"{name}: token file vocab {got['vocab']} eos {got['eos']}, tokenizers has {want_vocab} and "
             f"{hf.token_to_id(eos_text)}")
    if len(got["docs"]) != len(docs_in):
        fail(f"{name}: {len(got['docs'])} documents written, {len(docs_in)} given")
    bad = 0
    n_ids = 0
    for text, ids in zip(docs_in, got["docs"]):
        want = hf.encode(text).ids
        n_ids += len(want)
        if expect_bos and want[:1] != [hf.token_to_id("<|begin_of_text|>")]:
            fail(f"{name}: tokenizers' own encoding lacks the bos: the fixture is wrong")
        if ids != want:
            bad += 1
            if bad <= 5:
                k = next((i for i, (a, b) in enumerate(zip(ids, want)) if a != b), min(len(ids), len(want)))
                print(f"  {name}: mismatch on {text!r}\n    first difference at {k}: ftrain {ids[max(0, k - 3):k + 5]}"
                      f" tokenizers {want[max(0, k - 3):k + 5]}", file=sys.stderr)
    if bad:
        fail(f"{name}: {bad} of {len(docs_in)} documents encode differently from tokenizers")
    print(f"ok: {name}: {len(docs_in)} documents, {n_ids} ids, identical to tokenizers "
          f"(vocab {got['vocab']}, {got['token_bytes']}-byte tokens, eos {got['eos']})")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prep", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--vocab", type=int, default=2000)
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    import tokenizers
    from tokenizers import Tokenizer, pre_tokenizers
    print(f"tokenizers {tokenizers.__version__}")

    tok, spec = fixture.build(a.vocab)
    texts = fixture.texts()
    # Literal special tokens in the text (not the eos, which the writer refuses).
    texts += [f"{t[:20]}<|eot_id|>{t[20:]}" for t in texts[::17]]
    # Long runs: one piece of 20,000 bytes, or a regex backtracking over one
    # (\s+(?!\S)). ftrain-prep has also been seen equal on 1,000,000-character runs.
    texts += [" " * 20000 + "x", "a" * 20000, "1" * 20001, "!" * 20000, " \n" * 5000, "\u3000" * 5000 + "y"]

    # 1. As `tokenizers` saves it.
    path = os.path.join(a.workdir, "llama3", "tokenizer.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with quiet_output():  # tokenizers prints, id by id, that the vocabulary has holes below 128000: it has
        tok.save(path)
    saved = json.load(open(path, encoding="utf-8"))
    if not isinstance(saved["model"]["merges"][0], list) or not saved["model"]["ignore_merges"]:
        fail("expected tokenizers 0.21 to save merges as lists and keep ignore_merges")
    compare("llama3", a.prep, path, Tokenizer.from_file(path), texts, a.workdir, expect_bos=True)

    # 2. Merges as "a b" strings.
    variant = json.loads(json.dumps(saved))
    variant["model"]["merges"] = [" ".join(m) for m in saved["model"]["merges"]]
    path2 = os.path.join(a.workdir, "merge_strings.json")
    json.dump(variant, open(path2, "w", encoding="utf-8"), ensure_ascii=False)
    compare("merge_strings", a.prep, path2, Tokenizer.from_file(path2), texts, a.workdir, expect_bos=True)

    # 3. ignore_merges, on and off. A vocabulary trained by merges reaches
    # every whole word by its merges anyway, so ignore_merges changes nothing
    # there; Llama 3's (converted from tiktoken ranks) is different. Adding
    # whole pieces of the texts to the vocabulary, with no merge that makes
    # them, gives a file where the flag decides: on, such a piece is its one
    # token; off, the merges cut it up.
    variant = json.loads(json.dumps(saved))
    vocab = variant["model"]["vocab"]
    next_id = max(i for i in vocab.values() if i < fixture.FIRST_SPECIAL) + 1
    pieces = {}  # insertion-ordered set of the texts' long pieces not in the vocabulary
    for t in texts:
        for piece, _ in tok.pre_tokenizer.pre_tokenize_str(t):
            if len(piece) >= 3 and piece not in vocab:
                pieces[piece] = None
    for k, piece in enumerate(list(pieces)[::2]):  # every other one: the rest still merge
        vocab[piece] = next_id + k
    assert next_id + len(pieces) < fixture.FIRST_SPECIAL
    path3 = os.path.join(a.workdir, "whole_pieces.json")
    json.dump(variant, open(path3, "w", encoding="utf-8"), ensure_ascii=False)
    variant["model"]["ignore_merges"] = False
    path3b = os.path.join(a.workdir, "whole_pieces_no_ignore.json")
    json.dump(variant, open(path3b, "w", encoding="utf-8"), ensure_ascii=False)
    hf3, hf3b = Tokenizer.from_file(path3), Tokenizer.from_file(path3b)
    differing = sum(hf3.encode(t).ids != hf3b.encode(t).ids for t in texts)
    print(f"ignore_merges changes tokenizers' ids on {differing} of {len(texts)} texts")
    if differing < len(texts) // 4:
        fail("the ignore_merges variants do not differ enough to prove anything")
    compare("whole_pieces", a.prep, path3, hf3, texts, a.workdir, expect_bos=True)
    compare("whole_pieces_no_ignore", a.prep, path3b, hf3b, texts, a.workdir, expect_bos=True)

    # 4. GPT-2's regex (ByteLevel with use_regex), no post-processor.
    variant = json.loads(json.dumps(saved))
    variant["pre_tokenizer"] = json.loads(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True).__getstate__())
    variant["post_processor"] = None
    path4 = os.path.join(a.workdir, "gpt2_regex.json")
    json.dump(variant, open(path4, "w", encoding="utf-8"), ensure_ascii=False)
    compare("gpt2_regex", a.prep, path4, Tokenizer.from_file(path4), texts, a.workdir, expect_bos=False)

    # 5. The tiktoken rank file.
    rank_path = os.path.join(a.workdir, "tokenizer.model")
    write_rank_file(saved, rank_path)
    compare("tiktoken", a.prep, rank_path, oracle_for_rank_file(rank_path, saved), texts, a.workdir, expect_bos=True)

    # 6. Meta's own rank file, when one is at hand (not required: the
    # llama-models wheel on PyPI ships it as llama_models/llama3/tokenizer.model).
    real = os.environ.get("FTRAIN_LLAMA3_TIKTOKEN")
    if real:
        check_meta_vector(a.prep, real, a.workdir)
        compare("meta_llama3", a.prep, real, oracle_for_rank_file(real, saved), texts, a.workdir, expect_bos=True)
    else:
        print("note: FTRAIN_LLAMA3_TIKTOKEN not set, Meta's own rank file not compared")
    print("PASS")


def check_meta_vector(prep, rank_file, workdir):
    """llama-models' own test: "This is a test sentence." with bos and eos."""
    jsonl = os.path.join(workdir, "meta_vector.jsonl")
    with open(jsonl, "w") as f:
        f.write(json.dumps({"text": "This is a test sentence."}) + "\n")
    out = os.path.join(workdir, "meta_vector.tok")
    subprocess.run([prep, "text", "--out", out, "--tokenizer", rank_file, "--jsonl", jsonl], check=True,
                   capture_output=True)
    got = read_token_file(out)
    ids = got["docs"][0] + [got["eos"]]
    if ids != [128000, 2028, 374, 264, 1296, 11914, 13, 128001] or got["vocab"] != 128256:
        fail(f"Meta's test vector: got {ids}, vocab {got['vocab']}")
    print("ok: Meta's rank file: 'This is a test sentence.' -> [128000, 2028, 374, 264, 1296, 11914, 13, 128001]")


if __name__ == "__main__":
    main()
