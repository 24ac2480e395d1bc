#!/usr/bin/env python3
"""ftrain-prep's chat templates against transformers' apply_chat_template (issue 36, item 6).

    chat_template_test.py --prep FTRAIN_PREP --workdir DIR

For each model template in chat_templates/ (Llama 2 chat, Llama 3 and 3.1
Instruct, Mistral Instruct in its one-line and multi-line forms, Qwen2 and
Qwen2.5 Instruct, and Zephyr; each tokenizer_config.json says where its
chat_template comes from; and Llama 3's format with {% generation %} blocks,
whose mask transformers' return_assistant_tokens_mask gives)
and a set of multi-turn conversations (with and without a system message,
whitespace at the edges of contents, non-ASCII text, newlines):

  * and 40 random ones (seeded: whitespace and non-ASCII in every position);
  * transformers 4.47 renders each conversation with
    apply_chat_template(tokenize=False); a conversation the template refuses
    (its raise_exception) must make ftrain-prep fail with that message too;
  * `ftrain-prep instruct --template chat --tokenizer MODEL_DIR` (the
    template found beside the tokenizer, as for a real model directory)
    writes the others, and each example's token ids must equal the tokenizer's
    ids for transformers' text (`tokenizer(text, add_special_tokens=False)`),
    plus the tokenizer's eos when the text does not end with it;
  * decoding ftrain-prep's ids gives transformers' text exactly (the
    byte-level BPE is lossless, so this compares the rendered text byte for
    byte);
  * the mask is the documented rule computed independently from
    transformers' renderings of each conversation's prefixes and tokenizers'
    offsets, and (for the hand-written conversations) the trained tokens hold
    every assistant answer and none of the system or user text, and the
    masked tokens hold no answer.

The tokenizer is the committed Llama 3-shaped BPE of tests/unit/data/fixtures
with its special tokens renamed to the model's (<s> and </s> for Llama 2,
Mistral and Zephyr; <|im_start|>, <|im_end|>, <|endoftext|> for Qwen2), so
that every marker the template writes is one special token on both sides.
"""
import argparse
import json
import os
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from ftrain_test import fail  # noqa: E402

TEMPLATES = os.path.join(HERE, "chat_templates")
BASE_TOKENIZER = os.path.join(HERE, "..", "unit", "data", "fixtures", "llama3_style_tokenizer.json")

# Special token renames that give the base tokenizer each model's markers.
RENAMES = {
    "llama3_instruct": {},
    "llama3_instruct_generation": {},
    "llama3_1_instruct": {},
    "llama2_chat": {"<|begin_of_text|>": "<s>", "<|end_of_text|>": "</s>"},
    "mistral_instruct_v01": {"<|begin_of_text|>": "<s>", "<|end_of_text|>": "</s>"},
    "mistral_instruct_multiline": {"<|begin_of_text|>": "<s>", "<|end_of_text|>": "</s>"},
    "zephyr": {"<|begin_of_text|>": "<s>", "<|end_of_text|>": "</s>"},
    "qwen2_instruct": {"<|end_of_text|>": "<|endoftext|>", "<|reserved_special_token_0|>": "<|im_start|>",
                       "<|reserved_special_token_1|>": "<|im_end|>"},
    "qwen2_5_instruct": {"<|end_of_text|>": "<|endoftext|>", "<|reserved_special_token_0|>": "<|im_start|>",
                         "<|reserved_special_token_1|>": "<|im_end|>"},
}


def msg(role, content):
    return {"role": role, "content": content}


CONVERSATIONS = [
    [msg("user", "What is the capital of France?"), msg("assistant", "Paris is the capital of France.")],
    [msg("system", "You answer in one word."), msg("user", "Colour of the sky?"), msg("assistant", "Blue")],
    [msg("user", "  Leading and trailing spaces  "), msg("assistant", "  kept or trimmed as the template says  "),
     msg("user", "Second question:\nwith a newline"), msg("assistant", "Second answer,\nover two lines.\n")],
    [msg("system", "Be terse.\nNever apologise."), msg("user", "Übersetze: Guten Morgen"),
     msg("assistant", "おはようございます 😀"), msg("user", "und 'Gute Nacht'?"), msg("assistant", "おやすみなさい"),
     msg("user", "Danke"), msg("assistant", "どういたしまして")],
    [msg("user", "Count: 1, 22, 333"), msg("assistant", "4444 55555 666666")],
    # Roles that do not alternate: Llama 2 and Mistral refuse them.
    [msg("user", "first"), msg("user", "second in a row"), msg("assistant", "answer to both")],
]



def random_conversations(n, seed=36):
    """Alternating turns with an optional system message; contents with
    whitespace at the edges, newlines, tabs, non-ASCII and numbers."""
    import random
    rng = random.Random(seed)
    pieces = ["Hello", "wörld", "日本", "  ", "\n", "\t", "42", "x-y", "Ünïcode ✓", "emoji 😀", "\u00a0", "end.",
              "a\n\nb", "{json: 1}", "[INST]?", "'quote'", '"dq"']
    out = []
    for _ in range(n):
        text = lambda: "".join(rng.choice(pieces) for _ in range(rng.randint(1, 6)))  # noqa: E731
        conversation = [msg("system", text())] if rng.random() < 0.5 else []
        for _ in range(rng.randint(1, 4)):
            conversation += [msg("user", text()), msg("assistant", text())]
        out.append(conversation)
    return out


def read_token_file(path):
    data = open(path, "rb").read()
    if data[:8] != b"FTRNTOK1":
        fail(f"{path}: not a token file")
    version, token_bytes, n, _vocab, eos, n_docs = struct.unpack_from("<IIQQQQ", data, 8)
    if version != 2:
        fail(f"{path}: version {version}, expected 2 (masked)")
    tokens = struct.unpack_from(f"<{n}{ {2: 'H', 4: 'I'}[token_bytes] }", data, 64)
    mask_at = (64 + n * token_bytes + 7) // 8 * 8
    mask = [(data[mask_at + i // 8] >> (i % 8)) & 1 for i in range(n)]
    index_at = (mask_at + (n + 7) // 8 + 7) // 8 * 8
    index = struct.unpack_from(f"<{n_docs + 1}Q", data, index_at)
    return eos, [(list(tokens[a:b]), mask[a:b]) for a, b in zip(index, index[1:])]


def model_dir(name, workdir):
    """workdir/name: the renamed base tokenizer.json and the template's tokenizer_config.json."""
    text = open(BASE_TOKENIZER, encoding="utf-8").read()
    for old, new in RENAMES[name].items():
        if f'"{old}"' not in text:
            fail(f"{name}: the base tokenizer has no {old}")
        text = text.replace(f'"{old}"', f'"{new}"')
    d = os.path.join(workdir, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(text)
    config = json.load(open(os.path.join(TEMPLATES, name, "tokenizer_config.json"), encoding="utf-8"))
    json.dump(config, open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8"), ensure_ascii=False)
    return d, config


def hf_tokenizer(d, config):
    from transformers import PreTrainedTokenizerFast
    specials = {k: config[k] for k in ("bos_token", "eos_token", "unk_token", "pad_token") if config.get(k)}
    return PreTrainedTokenizerFast(tokenizer_file=os.path.join(d, "tokenizer.json"),
                                   chat_template=config["chat_template"], **specials)


def check_template(name, prep, workdir):
    d, config = model_dir(name, workdir)
    tok = hf_tokenizer(d, config)
    accepted, refused = [], []
    for conversation in CONVERSATIONS + random_conversations(40):
        try:
            accepted.append((conversation, tok.apply_chat_template(conversation, tokenize=False)))
        except Exception as e:  # jinja2's TemplateError from raise_exception
            refused.append((conversation, str(e)))
    if not accepted:
        fail(f"{name}: transformers refused every conversation")
    jsonl = os.path.join(workdir, f"{name}.jsonl")
    with open(jsonl, "w", encoding="utf-8") as f:
        for conversation, _ in accepted:
            f.write(json.dumps({"messages": conversation}, ensure_ascii=False) + "\n")
    out = os.path.join(workdir, f"{name}.tok")
    r = subprocess.run([prep, "instruct", "--tokenizer", d, "--template", "chat", "--out", out, jsonl],
                       capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"{name}: ftrain-prep failed ({r.returncode}): {r.stdout}{r.stderr}")
    if "tokenizer_config.json chat_template" not in r.stdout:
        fail(f"{name}: ftrain-prep did not say it used the model's chat template: {r.stdout}")
    eos, docs = read_token_file(out)
    if len(docs) != len(accepted):
        fail(f"{name}: {len(docs)} examples written, {len(accepted)} given")
    n_ids = 0
    for k, ((conversation, text), (ids, mask)) in enumerate(zip(accepted, docs)):
        want = tok(text, add_special_tokens=False)["input_ids"]
        if not want or want[-1] != eos:
            want = want + [eos]
        n_ids += len(want)
        if ids != want:
            i = next((i for i, (a, b) in enumerate(zip(ids, want)) if a != b), min(len(ids), len(want)))
            fail(f"{name}: conversation {k}: ids differ from transformers' at {i}: ftrain {ids[max(0, i - 3):i + 5]}"
                 f" transformers {want[max(0, i - 3):i + 5]}\n  text {text!r}")
        rendered = tok.decode(ids[:-1] if text_lacks_final_eos(tok, text, eos) else ids, skip_special_tokens=False,
                              clean_up_tokenization_spaces=False)
        if rendered != text:
            fail(f"{name}: conversation {k}: ftrain-prep's text\n  {rendered!r}\ntransformers'\n  {text!r}")
        if mask != oracle_mask(tok, conversation, text, len(ids)):
            fail(f"{name}: conversation {k}: the mask differs from the rule applied to transformers' renderings\n"
                 f"  ftrain {mask}\n  oracle {oracle_mask(tok, conversation, text, len(ids))}\n  text {text!r}")
        if not any(conversation is c for c in CONVERSATIONS):
            continue  # random contents repeat across turns: the checks below need unique ones
        trained = tok.decode([t for t, m in zip(ids, mask) if m], skip_special_tokens=False,
                             clean_up_tokenization_spaces=False)
        masked = tok.decode([t for t, m in zip(ids, mask) if not m], skip_special_tokens=False,
                            clean_up_tokenization_spaces=False)
        for m in conversation:
            content = m["content"].strip()
            if m["role"] == "assistant" and (content not in trained or content in masked):
                fail(f"{name}: conversation {k}: answer {content!r} not (only) in the trained tokens\n"
                     f"  trained {trained!r}\n  masked {masked!r}")
            if m["role"] != "assistant" and content in trained:
                fail(f"{name}: conversation {k}: {m['role']} text {content!r} is trained: {trained!r}")
    print(f"ok: {name}: {len(accepted)} conversations, {n_ids} ids, text and ids identical to transformers'"
          f" apply_chat_template; answers trained, prompts masked")
    for conversation, reason in refused[:3]:  # each is an ftrain-prep run of its own
        jsonl = os.path.join(workdir, f"{name}_refused.jsonl")
        with open(jsonl, "w", encoding="utf-8") as f:
            f.write(json.dumps({"messages": conversation}) + "\n")
        r = subprocess.run([prep, "instruct", "--tokenizer", d, "--template", "chat", "--out",
                            os.path.join(workdir, f"{name}_refused.tok"), jsonl], capture_output=True, text=True)
        if r.returncode != 1 or f"raised an exception: {reason}" not in r.stderr or f"{jsonl}:1" not in r.stderr:
            fail(f"{name}: transformers refused a conversation ({reason}); ftrain-prep said ({r.returncode}): {r.stderr}")
        print(f"ok: {name}: refuses what transformers refuses: {reason}")
    if len(refused) > 3:
        print(f"    ({len(refused)} refused by transformers, the first 3 run through ftrain-prep)")


def oracle_mask(tok, conversation, text, n_ids):
    """The documented rule (data.md, "The model's chat template") computed
    from transformers' own renderings and tokenizers' offsets: an assistant
    turn is what rendering it adds to the conversation before it (with the
    generation prompt when that is a prefix); a token overlapping a turn is
    trained; so is the final eos. A template with {% generation %} blocks:
    the character ranges those blocks wrote, as transformers' own tracker
    finds them for return_assistant_tokens_mask (whose token mask itself
    leaves out the last byte-level pieces of an answer ending in a character
    split over several tokens: it marks up to char_to_token(end - 1) only)."""
    if "{% generation %}" in tok.chat_template:
        from transformers.utils.chat_template_utils import _compile_jinja_template, _render_with_assistant_indices
        rendered, spans = _render_with_assistant_indices(_compile_jinja_template(tok.chat_template), conversation,
                                                         None, None, False, **tok.special_tokens_map)
        if rendered != text:
            fail("transformers' tracker renders another text than apply_chat_template")
        offsets = tok(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        mask = [int(any(a < end and start < b for a, b in spans)) for start, end in offsets]
        return mask[:n_ids - 1] + [1]
    spans = []
    for m, message in enumerate(conversation):
        if message["role"] != "assistant":
            continue
        with_turn = tok.apply_chat_template(conversation[:m + 1], tokenize=False)
        before = tok.apply_chat_template(conversation[:m], tokenize=False, add_generation_prompt=True)
        if not with_turn.startswith(before):
            before = tok.apply_chat_template(conversation[:m], tokenize=False)
        spans.append((len(before), len(with_turn)))
    offsets = tok(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    mask = [int(any(a < end and start < b for a, b in spans)) for start, end in offsets]
    return mask[:n_ids - 1] + [1]  # the last id is the eos: the template's, or the one the writer appended


def text_lacks_final_eos(tok, text, eos):
    ids = tok(text, add_special_tokens=False)["input_ids"]
    return not ids or ids[-1] != eos


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prep", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    import transformers
    print(f"transformers {transformers.__version__}")
    names = sorted(os.listdir(TEMPLATES))
    if sorted(RENAMES) != names:
        fail(f"chat_templates/ holds {names}, the test knows {sorted(RENAMES)}")
    for name in names:
        check_template(name, a.prep, a.workdir)
    print("PASS")


if __name__ == "__main__":
    main()
