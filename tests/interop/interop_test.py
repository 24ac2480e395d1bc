#!/usr/bin/env python3
"""Interoperability with the real Hugging Face stack (CTest label interop).

Runs in the venv of share/scripts/interop-venv.sh (transformers, timm over
Debian's torch 1.13). Usage:

  interop_test.py SCENARIO --ftrain BIN --prep BIN --convert BIN --logprobs BIN
                  --plugin-dir DIR --mpirun "MPIEXEC FLAGS..." --workdir DIR

Why log-probabilities: see ftrain_logprobs.cpp (ftrain's head returns only
the loss; log-softmax is the logits up to one constant per row).

Scenarios (every comparison in float32; ftrain's side comes from ftrain's own
code: `mpirun -np 2 ftrain` trains and save_final writes the consolidated
file, ftrain-convert writes the Hugging Face directory, ftrain_logprobs runs
the plugin's units forward on a fixed batch):

  llama2_to_hf       tiny Llama 2-style (MHA, untied, rope_theta 10000)
  llama3_to_hf       tiny Llama 3-style (GQA, rope_theta 500000, llama3 rope
                     scaling chosen so every frequency band is hit), untied
  llama3_tied_to_hf  the same, tie_word_embeddings true
                     Each: 4 AdamW steps on np 2, save_final, ftrain-convert
                     h5-to-safetensors (several shards + index + config.json),
                     LlamaForCausalLM.from_pretrained with no missing or
                     unexpected keys (llama3: with --tokenizer, the tokenizer
                     and bos/eos ids pass through, and huggingface.md's
                     generate() snippet runs on the export as written;
                     else the ids are null);
                     its log_softmax(logits) on a fixed 2x32 batch equals
                     ftrain's within 1e-5 relative.
  hf_to_ftrain       a random LlamaForCausalLM (GQA, llama3 rope, untied)
                     save_pretrained with max_shard_size 20KB; the deck's
                     model line from its config.json (ftrain-convert
                     deck-model); `init safetensors DIR` on np 2, one AdamW
                     step: ftrain's step-1 loss equals HF's loss on the same 4 windows within 1e-5
                     relative; every weight after the step equals HF's after
                     torch.optim.AdamW (same lr, betas, eps, weight decay on
                     matrices only) within 1e-5 absolute, 1% of the step
                     (lr 1e-3, eps 1e-6); ftrain_logprobs on the HF
                     directory equals HF's log-probabilities (1e-5).
  vit_both_ways      timm VisionTransformer, tiny config: a random timm model
                     saved with safetensors loads in ftrain and gives timm's
                     log-probabilities; ftrain trains 3 steps on np 2, exports,
                     timm builds the model from the exported config.json and
                     loads every tensor strictly: logits (log-softmax) equal.
                     ftrain's vit-b16 preset declares exactly timm's
                     vit_base_patch16_224 state_dict (names and shapes).
  lora_to_peft       LoRA on np 2 (q/v/o_proj, rank 4): save_adapter's
                     directory loads with PeftModel.from_pretrained onto the
                     exported base; its log-probabilities equal ftrain's
                     merged model (merge_adapter on + save_final) within 1e-5.
  peft_to_ftrain     an adapter written by PEFT (get_peft_model, B random)
                     on a random LlamaForCausalLM: `init adapter` + `merge_adapter
                     on` in ftrain equals PEFT's merge_and_unload within 1e-6,
                     and ftrain's log-probabilities equal PeftModel's (1e-5).
  packed_documents   a random LlamaForCausalLM (GQA, llama3 rope); two
                     32-token rows packing 4 and 3 documents of different
                     lengths, with the document mask and RoPE positions
                     restarting at each document (training's defaults):
                     ftrain_logprobs' log-probabilities of each document
                     equal LlamaForCausalLM's on that document alone
                     (1e-5); with `positions continue` too (rounding only);
                     without the mask the later documents differ (> 1e-2)
                     while each row's first still matches.
"""
import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import ftrain_test  # noqa: E402
from ftrain_test import fail  # noqa: E402

# Everything is local: never reach for the Hugging Face Hub (CI has no route to it).
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"

import numpy as np  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)  # two ranks of ftrain may run beside us on two cores
REL = 1e-5         # relative, log-probabilities and losses (fp32 on both sides)
WEIGHT_TOL = 1e-5  # absolute, weights after one AdamW step of lr 1e-3 (1% of the step)



class Env(ftrain_test.Runner):
    def __init__(self, args):
        super().__init__(args.ftrain, args.mpirun, args.workdir)
        self.args = args
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)

    def run(self, cmd, what):
        return ftrain_test.run(cmd, 240, cwd=self.dir, expect_ok=True, what=f"{what} ({' '.join(cmd)})").stdout

    def train(self, deck_text, name):
        deck = self.write(name + ".in", deck_text)
        self.run(self.mpi_argv(2) + self.ftrain_argv(deck), f"ftrain {name}")
        return ftrain_test.read_metrics(self.path(name, "metrics.jsonl"))

    def convert(self, h5, out_dir, *extra):
        self.run([self.args.convert, "h5-to-safetensors", h5, out_dir, *extra], "ftrain-convert")

    def logprobs(self, model, overrides, weights, inputs, preset="tiny", documents=None, positions="restart"):
        """ftrain's log-probabilities on `inputs` (int32 tokens [B, T] or float32 NHWC images);
        `documents` (int32 [B, T] ids) packs each row's documents under the attention document mask."""
        raw = self.path("batch.bin")
        out = self.path("logprobs.bin")
        np.ascontiguousarray(inputs).tofile(raw)
        cmd = [self.args.logprobs, "--plugin-dir", self.args.plugin_dir, "--model", model, "--preset", preset,
               "--weights", weights, "--inputs", raw, "--shape", ",".join(map(str, inputs.shape)), "--out", out]
        if documents is not None:
            ids = self.path("documents.bin")
            np.ascontiguousarray(documents, dtype=np.int32).tofile(ids)
            cmd += ["--documents", ids, "--positions", positions]
        for k, v in overrides.items():
            cmd += ["--set", f"{k}={v}"]
        self.run(cmd, "ftrain_logprobs")
        return np.fromfile(out, dtype=np.float32)


def write_tokens(path, tokens, vocab):
    """An ftrain token file (share/doc/data.md), u16 tokens, no eos."""
    tokens = np.asarray(tokens, dtype=np.uint16)
    header = b"FTRNTOK1" + np.array([1, 2], "<u4").tobytes() + np.array(
        [len(tokens), vocab, 0xFFFFFFFFFFFFFFFF, 0], "<u8").tobytes() + bytes(16)
    with open(path, "wb") as f:
        f.write(header + tokens.astype("<u2").tobytes())


def expect_close(name, got, want, rel=REL):
    """|got - want| <= rel * |want| elementwise (float64 arithmetic)."""
    got = np.asarray(got, np.float64).ravel()
    want = np.asarray(want, np.float64).ravel()
    if got.shape != want.shape:
        fail(f"{name}: {got.size} values from ftrain, {want.size} from the reference")
    err = np.abs(got - want) / np.maximum(np.abs(want), 1e-30)
    worst = int(np.argmax(err))
    if not err[worst] <= rel:
        fail(f"{name}: element {worst} differs: ftrain {got[worst]!r}, reference {want[worst]!r} "
             f"(relative {err[worst]:.3g} > {rel:g}; {int((err > rel).sum())} of {err.size} elements off)")
    print(f"ok: {name}: {err.size} values, largest relative difference {err[worst]:.3g} (allowed {rel:g})")


# ---- Llama ------------------------------------------------------------------------------------

LLAMA_COMMON = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                    num_attention_heads=4, rms_norm_eps=1e-5, max_position_embeddings=2048)
LLAMA_CONFIGS = {
    "llama2": dict(LLAMA_COMMON, num_key_value_heads=4, rope_theta=10000.0, tie_word_embeddings=False),
    # head_dim 8: wavelengths 6.3, 167, 4443, 1.2e5 tokens; with original_max 256, low 1, high 4 the first
    # is kept, the second interpolated (64 < 167 < 256), the last two divided by the factor.
    "llama3": dict(LLAMA_COMMON, num_key_value_heads=2, rope_theta=500000.0, tie_word_embeddings=False,
                   rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                     original_max_position_embeddings=256)),
}
LLAMA_CONFIGS["llama3_tied"] = dict(LLAMA_CONFIGS["llama3"], tie_word_embeddings=True)


def ftrain_overrides(config):
    """HF config keys -> the `model llama ...` overrides (ftrain's keys are HF's)."""
    out = {}
    for k, v in config.items():
        if k == "rope_scaling":
            out["rope_scaling"] = v["rope_type"]
            for key in ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"):
                out[f"rope_scaling_{key}"] = v[key]
        elif isinstance(v, bool):
            out[k] = "true" if v else "false"
        else:
            out[k] = v
    return out


def model_line(config):
    return "model llama preset tiny " + " ".join(f"{k} {v}" for k, v in ftrain_overrides(config).items()) + "\n"


def hf_logprobs(model, tokens):
    with torch.no_grad():
        logits = model(torch.from_numpy(tokens.astype(np.int64))).logits
    return torch.log_softmax(logits.double(), dim=-1).numpy()


def fixed_tokens(vocab, batch=2, seq=32, seed=3):
    return np.random.default_rng(seed).integers(0, vocab, size=(batch, seq)).astype(np.int32)


def make_tokenizer_dir(path, vocab):
    """A Hugging Face tokenizer directory as a model ships it: a BPE trained with `tokenizers`, saved by
    PreTrainedTokenizerFast, and a config.json naming the special token ids."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    corpus = ["the quick brown fox jumps over the lazy dog", "ftrain trains llamas", "def f(x): return x * 2"] * 20
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<s>", "</s>", "<unk>"]))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.save_pretrained(path)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump({"model_type": "llama", "bos_token_id": fast.bos_token_id, "eos_token_id": fast.eos_token_id}, f)
    return path


def check_tokenizer_passed_through(out, tokenizer_src, config):
    """--tokenizer copies the tokenizer and the special ids; without it the ids are null, not guessed."""
    if tokenizer_src is None:
        raw = json.load(open(os.path.join(out, "config.json")))
        if raw.get("bos_token_id", "absent") is not None or raw.get("eos_token_id", "absent") is not None:
            fail(f"config.json without --tokenizer should have null bos/eos ids: {raw}")
        print("ok: without --tokenizer, bos_token_id and eos_token_id are null")
        return
    from transformers import AutoTokenizer
    want = AutoTokenizer.from_pretrained(tokenizer_src)
    got = AutoTokenizer.from_pretrained(out)
    text = "the lazy fox returns x * 2"
    if got(text)["input_ids"] != want(text)["input_ids"] or got.eos_token != "</s>":
        fail(f"tokenizer copied through encodes differently: {got(text)} vs {want(text)}")
    if (config.bos_token_id, config.eos_token_id) != (want.bos_token_id, want.eos_token_id):
        fail(f"config.json bos/eos ids {config.bos_token_id}/{config.eos_token_id}, tokenizer's "
             f"{want.bos_token_id}/{want.eos_token_id}")
    print(f"ok: --tokenizer: AutoTokenizer.from_pretrained(export) encodes as the source; bos/eos ids "
          f"{config.bos_token_id}/{config.eos_token_id}")


DOCS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "share", "doc")


def documented_block(page, marker):
    """The ```python block right after `<!-- interop: MARKER -->` in share/doc/PAGE."""
    text = open(os.path.join(DOCS, page)).read()
    m = re.search(r"<!-- interop: " + re.escape(marker) + r" -->\s*```python\n(.*?)```", text, re.S)
    if not m:
        fail(f"share/doc/{page} has no ```python block after <!-- interop: {marker} -->")
    return m.group(1)


def run_generate_snippet(env, export_dir):
    """huggingface.md's generate() block, run as it stands (its "out" is the export) in a fresh
    interpreter; its text must continue the prompt with the tokens a greedy loop over logits picks."""
    import torch
    from transformers import AutoTokenizer, LlamaForCausalLM
    code = documented_block("huggingface.md", "generate")
    cwd = env.path("snippet")
    os.makedirs(cwd, exist_ok=True)
    if not os.path.lexists(os.path.join(cwd, "out")):
        os.symlink(export_dir, os.path.join(cwd, "out"))
    p = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        fail(f"the documented generate() snippet failed (exit {p.returncode}):\n{code}\n{p.stderr[-3000:]}")
    model = LlamaForCausalLM.from_pretrained(export_dir, torch_dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(export_dir)
    ids = tokenizer("the quick brown fox", return_tensors="pt").input_ids
    with torch.no_grad():
        for _ in range(20):
            ids = torch.cat([ids, model(ids).logits[:, -1].argmax(-1, keepdim=True)], dim=1)
            if ids[0, -1].item() == tokenizer.eos_token_id:
                break
    want = tokenizer.decode(ids[0], skip_special_tokens=True)
    if p.stdout.strip() != want.strip():
        fail(f"the documented generate() printed {p.stdout.strip()!r}; a greedy loop gives {want!r}")
    print(f"ok: huggingface.md's generate() snippet runs on the export: {want!r}")


def scenario_to_hf(env, name):
    from transformers import LlamaForCausalLM
    config = LLAMA_CONFIGS[name]
    vocab = config["vocab_size"]
    rng = np.random.default_rng(1)
    write_tokens(env.path("train.tok"), rng.integers(0, vocab, 4096), vocab)
    # init std 0.2 (not 0.02): attention far from uniform, so a wrong RoPE shows in the logits.
    metrics = env.train(model_line(config) + """\
precision fp32
seed 5
data tokens train.tok packing on shuffle on
batch micro 2 seq_len 16
optimizer adamw lr 1e-2 weight_decay 0.01
max_steps 4
init random std 0.2
fsdp full_shard
save_final final.h5
log every 1
run_dir run
""", "run")
    if [m["step"] for m in metrics if "loss" in m] != [1, 2, 3, 4]:
        fail(f"expected 4 logged steps: {metrics}")

    out = env.path("hf")
    tokenizer_src = make_tokenizer_dir(env.path("tokenizer_src"), vocab) if name == "llama3" else None
    env.convert(env.path("final.h5"), out, "--shard-size", "20KB",
                *(["--tokenizer", tokenizer_src] if tokenizer_src else []))
    index = json.load(open(os.path.join(out, "model.safetensors.index.json")))
    shards = sorted(set(index["weight_map"].values()))
    if len(shards) < 2:
        fail(f"expected several shards, got {shards}")
    model, info = LlamaForCausalLM.from_pretrained(out, torch_dtype=torch.float32, output_loading_info=True)
    bad = {k: v for k, v in info.items() if v}
    if bad:
        fail(f"from_pretrained({out}) did not take the checkpoint as it is: {bad}")
    loaded = model.config
    for k, v in config.items():
        got = getattr(loaded, k)
        if k == "rope_scaling":
            got = {key: got[key] for key in v}
        if got != v:
            fail(f"config.json: {k} loads as {got!r}, the run had {v!r}")
    if model.config.torch_dtype != torch.float32:
        fail(f"config.json torch_dtype: {model.config.torch_dtype}")
    print(f"ok: from_pretrained: {len(shards)} shards, no missing/unexpected keys, config as trained")
    check_tokenizer_passed_through(out, tokenizer_src, model.config)
    if tokenizer_src:
        run_generate_snippet(env, out)
    model.eval()

    tokens = fixed_tokens(vocab)
    want = hf_logprobs(model, tokens)
    got = env.logprobs("llama", ftrain_overrides(config), env.path("final.h5"), tokens)
    expect_close(f"{name}: log_softmax(logits), ftrain (final.h5) vs LlamaForCausalLM.from_pretrained", got, want)


# ---- LoRA adapters -> PEFT (issue 16, issue 21 part 4) -----------------------------------------

def scenario_lora_to_peft(env):
    """ftrain trains LoRA adapters (np 2, frozen base) and writes them with save_adapter;
    PeftModel.from_pretrained loads them onto the base (exported with ftrain-convert) with
    nothing missing, and its log-probabilities equal those of ftrain's own merged model
    (the same run with merge_adapter on, save_final of W + scale B A) within 1e-5."""
    from peft import PeftModel
    from transformers import LlamaForCausalLM
    config = LLAMA_CONFIGS["llama3"]
    vocab = config["vocab_size"]
    rng = np.random.default_rng(1)
    write_tokens(env.path("train.tok"), rng.integers(0, vocab, 4096), vocab)
    # lr 5e-2 and init std 0.2: the adapters move the logits well beyond the tolerance.
    deck = model_line(config) + """\
precision fp32
seed 5
data tokens train.tok packing on shuffle on
batch micro 2 seq_len 16
optimizer adamw lr 5e-2 weight_decay 0.0
max_steps 4
init random std 0.2
lora rank 4 alpha 8 dropout 0.05 targets q_proj,v_proj,o_proj
fsdp full_shard
log every 1
"""
    env.train(deck + "save_adapter adapter\nsave_final base.h5\nrun_dir run\n", "run")
    env.train(deck + "merge_adapter on\nsave_final merged.h5\nrun_dir merged_run\n", "merged_run")
    cfg = json.load(open(env.path("adapter", "adapter_config.json")))
    if cfg["peft_type"] != "LORA" or cfg["r"] != 4 or cfg["lora_alpha"] != 8 or \
            sorted(cfg["target_modules"]) != ["o_proj", "q_proj", "v_proj"]:
        fail(f"adapter_config.json: {cfg}")
    env.convert(env.path("base.h5"), env.path("hf_base"))
    base = LlamaForCausalLM.from_pretrained(env.path("hf_base"), torch_dtype=torch.float32)
    tokens = fixed_tokens(vocab)
    plain = hf_logprobs(base, tokens)
    model = PeftModel.from_pretrained(base, env.path("adapter"))
    model.eval()
    lora_a = [n for n, _ in model.named_parameters() if "lora_A" in n]
    if len(lora_a) != 3 * config["num_hidden_layers"]:
        fail(f"PeftModel has {len(lora_a)} lora_A matrices, expected {3 * config['num_hidden_layers']}")
    want = hf_logprobs(model, tokens)
    if np.max(np.abs(want - plain)) < 1e-3:
        fail("the adapters do not change the logits: nothing was trained or loaded")
    got = env.logprobs("llama", ftrain_overrides(config), env.path("merged.h5"), tokens)
    expect_close("lora: log_softmax(logits), ftrain merged (merge_adapter) vs PeftModel.from_pretrained", got, want)


def scenario_peft_to_ftrain(env):
    """A PEFT adapter (get_peft_model + save_pretrained, B random so it changes the logits) on a
    random LlamaForCausalLM: ftrain loads base and adapter (init safetensors + init adapter, np 2),
    merges (merge_adapter on) and exports; the merged weights equal PEFT's merge_and_unload within
    1e-6 and ftrain's log-probabilities equal PeftModel's within 1e-5."""
    import h5py
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LLAMA_CONFIGS["llama3"]
    vocab = config["vocab_size"]
    torch.manual_seed(9)
    base = LlamaForCausalLM(LlamaConfig(**config, initializer_range=0.3)).float()
    base.save_pretrained(env.path("hf_base"), safe_serialization=True)
    # init_lora_weights False: B is random too (PEFT's default B = 0 would make the adapter a no-op).
    peft_model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, init_lora_weights=False,
                                                 target_modules=["q_proj", "v_proj"]))
    peft_model.save_pretrained(env.path("peft_adapter"))
    peft_model.eval()
    tokens = fixed_tokens(vocab)
    want = hf_logprobs(peft_model, tokens)
    with peft_model.disable_adapter():
        plain = hf_logprobs(peft_model, tokens)
    if np.max(np.abs(want - plain)) < 1e-3:
        fail("PEFT's adapter does not change the logits: the comparison could not tell it was loaded")
    merged_ref = {k: v.detach().double().numpy() for k, v in peft_model.merge_and_unload().state_dict().items()}

    rng = np.random.default_rng(2)
    write_tokens(env.path("train.tok"), rng.integers(0, vocab, 4096), vocab)
    line = env.run([env.args.convert, "deck-model", env.path("hf_base")], "ftrain-convert deck-model").strip()
    # lr 1e-30: one step that cannot move an f32 weight, so the export is the loaded adapter merged.
    env.train(line + "\n" + """\
precision fp32
seed 5
data tokens train.tok packing on shuffle on
batch micro 2 seq_len 16
optimizer adamw lr 1e-30 weight_decay 0.0
schedule constant
max_steps 1
init safetensors hf_base
init adapter peft_adapter
lora rank 4 alpha 8 dropout 0.0 targets q_proj,v_proj
merge_adapter on
save_final merged.h5
fsdp full_shard
log every 1
run_dir run
""", "run")
    worst, worst_name, changed = 0.0, None, 0
    with h5py.File(env.path("merged.h5")) as f:
        if sorted(f.keys()) != sorted(merged_ref):
            fail(f"merged.h5 tensors {sorted(f.keys())} != merge_and_unload's {sorted(merged_ref)}")
        before = {k: v.detach().double().numpy() for k, v in LlamaForCausalLM.from_pretrained(
            env.path("hf_base"), torch_dtype=torch.float32).state_dict().items()}
        for name, ref in merged_ref.items():
            err = float(np.abs(np.asarray(f[name], np.float64) - ref).max())
            if err > 1e-6:
                fail(f"{name}: ftrain's merge differs from PEFT's merge_and_unload by {err:.3g} (allowed 1e-6)")
            if err > worst:
                worst, worst_name = err, name
            changed += int(np.abs(ref - before[name]).max() > 1e-4)
    if changed != 2 * config["num_hidden_layers"]:
        fail(f"merge_and_unload changed {changed} tensors, expected q_proj and v_proj of every layer")
    print(f"ok: ftrain's merged weights equal PEFT's merge_and_unload (largest difference {worst:.3g}, "
          f"{worst_name}); {changed} tensors carry an adapter")
    got = env.logprobs("llama", ftrain_overrides(config), env.path("merged.h5"), tokens)
    expect_close("peft -> ftrain: log_softmax(logits), ftrain (init adapter + merge) vs PeftModel", got, want)


# ---- transformers -> ftrain, one AdamW step ----------------------------------------------------

def scenario_hf_to_ftrain(env):
    import h5py
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LLAMA_CONFIGS["llama3"]
    vocab, T, B = config["vocab_size"], 16, 4  # B = micro 2 x 2 ranks
    torch.manual_seed(7)
    # initializer_range 0.3, not 0.02: attention far from uniform, so RoPE and every weight matter to the loss.
    hf_config = LlamaConfig(**config, initializer_range=0.3, bos_token_id=0, eos_token_id=1)
    model = LlamaForCausalLM(hf_config).float()
    src = env.path("hf")
    model.save_pretrained(src, max_shard_size="20KB", safe_serialization=True)
    shards = [f for f in os.listdir(src) if f.endswith(".safetensors")]
    if len(shards) < 3 or not os.path.exists(os.path.join(src, "model.safetensors.index.json")):
        fail(f"save_pretrained should have written several shards and an index: {sorted(os.listdir(src))}")

    # packing on, shuffle off: step 1's global batch is windows 0..3 = tokens [w*T, w*T + T + 1).
    tokens = np.random.default_rng(11).integers(0, vocab, B * T + 1)
    write_tokens(env.path("train.tok"), tokens, vocab)
    windows = np.stack([tokens[w * T:w * T + T + 1] for w in range(B)])
    inputs = torch.from_numpy(windows[:, :-1].astype(np.int64))
    targets = torch.from_numpy(windows[:, 1:].astype(np.int64))

    # eps 1e-6, not 1e-8: step 1 of Adam is lr * g / (|g| + eps), so elements whose gradient is
    # within float noise of 0 would otherwise flip between +lr and -lr; with 1e-6 the update is
    # smooth in g and the weights can be compared to WEIGHT_TOL = 1e-5 = 1% of the lr-sized step.
    lr, beta1, beta2, eps, wd = 1e-3, 0.9, 0.95, 1e-6, 0.1
    # The model line comes from save_pretrained's config.json, through ftrain-convert deck-model.
    line = env.run([env.args.convert, "deck-model", src], "ftrain-convert deck-model").strip()
    print(f"ok: ftrain-convert deck-model {src}: {line}")
    metrics = env.train(line + "\n" + f"""\
precision fp32
seed 5
data tokens train.tok packing on shuffle off
batch micro 2 seq_len {T}
optimizer adamw lr {lr} beta1 {beta1} beta2 {beta2} eps {eps} weight_decay {wd}
schedule constant
max_steps 1
init safetensors hf
fsdp full_shard
save_final final.h5
log every 1
run_dir run
""", "run")
    step1 = [m for m in metrics if m.get("step") == 1 and "loss" in m]
    if not step1 or step1[0]["lr"] != lr:
        fail(f"step 1 with lr {lr} expected in metrics: {metrics}")

    model.train()
    logits = model(inputs).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1))
    expect_close("step-1 loss, ftrain (init safetensors, np 2) vs LlamaForCausalLM", [step1[0]["loss"]],
                 [loss.item()])

    # What ftrain's import computes, before the step: log-probabilities on a fixed batch.
    model.eval()
    fixed = fixed_tokens(vocab)
    expect_close("log_softmax(logits), ftrain_logprobs (HF sharded dir) vs LlamaForCausalLM",
                 env.logprobs("llama", ftrain_overrides(config), src, fixed), hf_logprobs(model, fixed))

    # One torch.optim.AdamW step: decay on matrices (ftrain: weight_decay on every 2-D parameter, none on norms).
    model.train()
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=(beta1, beta2), eps=eps)
    opt.zero_grad()
    loss.backward()
    opt.step()
    worst_abs, worst_name, moved = 0.0, None, 0.0
    with h5py.File(env.path("final.h5")) as f:
        names = sorted(k for k in f.keys())
        hf_names = sorted(n for n, _ in model.named_parameters())
        if names != hf_names:
            fail(f"final.h5 parameters {names} != HF's {hf_names}")
        for n, p in model.named_parameters():
            got = np.asarray(f[n], np.float64)
            want = p.detach().double().numpy()
            moved = max(moved, float(np.abs(want - before[n].double().numpy()).max()))
            err = np.abs(got - want)
            if err.max() > WEIGHT_TOL:
                i = np.unravel_index(np.argmax(err), err.shape)
                fail(f"after one AdamW step, {n}{list(i)}: ftrain {got[i]!r}, torch {want[i]!r} "
                     f"(before {before[n].double().numpy()[i]!r}; allowed {WEIGHT_TOL:g})")
            if err.max() > worst_abs:
                worst_abs, worst_name = float(err.max()), n
    print(f"ok: after one AdamW step all {len(names)} tensors match torch.optim.AdamW: largest difference "
          f"{worst_abs:.3g} ({worst_name}), the step moved weights by up to {moved:.3g}")


# ---- ViT --------------------------------------------------------------------------------------

VIT_TINY = dict(img_size=32, patch_size=8, in_chans=3, num_classes=10, embed_dim=64, depth=2, num_heads=4,
                mlp_ratio=4.0, qkv_bias=True, class_token=True, global_pool="token")


def timm_logprobs(model, images_nhwc):
    with torch.no_grad():
        logits = model(torch.from_numpy(images_nhwc).permute(0, 3, 1, 2).contiguous())
    return torch.log_softmax(logits.double(), dim=-1).numpy()


def scenario_vit_both_ways(env):
    import timm
    from safetensors.torch import load_file, save_file
    from timm.models.vision_transformer import VisionTransformer

    # The ViT-B/16 layout: ftrain's vit-b16 preset declares timm's state_dict, name for name, shape for shape.
    listing = env.run([env.args.logprobs, "--plugin-dir", env.args.plugin_dir, "--model", "vit", "--preset",
                       "vit-b16", "--list-params"], "ftrain_logprobs --list-params")
    ours = {line.split()[0]: tuple(int(d) for d in line.split()[1].split(",")) for line in listing.splitlines()}
    theirs = {k: tuple(v.shape) for k, v in timm.create_model("vit_base_patch16_224").state_dict().items()}
    if ours != theirs:
        diff = sorted(set(ours.items()) ^ set(theirs.items()))
        fail(f"ftrain vit-b16 vs timm vit_base_patch16_224 state_dict: differing entries {diff[:10]}")
    print(f"ok: ftrain's vit-b16 parameters are timm vit_base_patch16_224's state_dict ({len(ours)} tensors)")

    images = np.random.default_rng(5).standard_normal((3, 32, 32, 3)).astype(np.float32)

    # timm -> ftrain.
    torch.manual_seed(3)
    reference = VisionTransformer(**VIT_TINY).eval()
    with torch.no_grad():  # timm zero-inits the head and cls_token is tiny: give every tensor some weight
        for p in reference.parameters():
            p.add_(0.05 * torch.randn_like(p))
    save_file({k: v.contiguous() for k, v in reference.state_dict().items()}, env.path("timm.safetensors"),
              metadata={"format": "pt"})
    expect_close("timm -> ftrain: log_softmax(logits), ftrain_logprobs vs timm VisionTransformer",
                 env.logprobs("vit", {}, env.path("timm.safetensors"), images), timm_logprobs(reference, images))

    # ftrain -> timm.
    env.train("""\
model vit preset tiny
precision fp32
seed 9
data images synthetic classes 10 samples 64 shuffle on
batch micro 4
optimizer adamw lr 1e-2 weight_decay 0.05
max_steps 3
init random std 0.02
fsdp full_shard
save_final final.h5
log every 1
run_dir run
""", "run")
    out = env.path("vit_hf")
    env.convert(env.path("final.h5"), out, "--shard-size", "50KB")
    config = json.load(open(os.path.join(out, "config.json")))
    model = timm.create_model(config["architecture"], pretrained=False, **config["model_args"]).eval()
    state = {}
    for shard in sorted(set(json.load(open(os.path.join(out, "model.safetensors.index.json")))["weight_map"].values())):
        state.update(load_file(os.path.join(out, shard)))
    model.load_state_dict(state, strict=True)
    if config["num_classes"] != 10 or config["model_args"]["img_size"] != 32:
        fail(f"config.json: {config}")
    print(f"ok: timm.create_model({config['architecture']!r}, **model_args) loads the export strictly")
    expect_close("ftrain -> timm: log_softmax(logits), ftrain (final.h5) vs timm", 
                 env.logprobs("vit", {}, env.path("final.h5"), images), timm_logprobs(model, images))


def scenario_packed_documents(env):
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LLAMA_CONFIGS["llama3"]
    vocab, T = config["vocab_size"], 32
    torch.manual_seed(13)
    # initializer_range 0.3: attention far from uniform, so a document reading another shows.
    model = LlamaForCausalLM(LlamaConfig(**config, initializer_range=0.3)).float().eval()
    src = env.path("hf")
    model.save_pretrained(src, safe_serialization=True)

    lengths = [[7, 12, 5, 8], [20, 3, 9]]  # each row's documents, packed into T tokens
    tokens = fixed_tokens(vocab, batch=len(lengths), seq=T, seed=5)
    documents = np.stack([np.repeat(np.arange(len(row)), row) for row in lengths]).astype(np.int32)
    spans = [[(int(sum(row[:d])), int(sum(row[:d + 1]))) for d in range(len(row))] for row in lengths]
    # Transformers' answer: each document run alone (positions 0..len-1, nothing else to attend).
    alone = [[hf_logprobs(model, tokens[b:b + 1, s:e])[0] for s, e in row] for b, row in enumerate(spans)]
    overrides = ftrain_overrides(config)

    def per_document(logprobs):
        lp = logprobs.reshape(len(lengths), T, vocab)
        return [[lp[b, s:e] for s, e in row] for b, row in enumerate(spans)]

    masked = per_document(env.logprobs("llama", overrides, src, tokens, documents=documents))
    kept = per_document(env.logprobs("llama", overrides, src, tokens, documents=documents, positions="continue"))
    for b, row in enumerate(spans):
        for d, (s, e) in enumerate(row):
            what = f"row {b} document {d} (tokens {s}..{e - 1})"
            expect_close(f"{what}, packed with the document mask vs LlamaForCausalLM on it alone",
                         masked[b][d], alone[b][d])
            expect_close(f"{what}, positions continue vs LlamaForCausalLM on it alone", kept[b][d], alone[b][d])

    # Must fail without the mask: every later document reads the ones before it.
    unmasked = per_document(env.logprobs("llama", overrides, src, tokens))
    for b, row in enumerate(spans):
        expect_close(f"row {b} first document without the mask (nothing before it to read)", unmasked[b][0],
                     alone[b][0])
        for d in range(1, len(row)):
            got, want = np.asarray(unmasked[b][d], np.float64), np.asarray(alone[b][d], np.float64)
            worst = float(np.max(np.abs(got - want) / np.maximum(np.abs(want), 1e-30)))
            if worst < 1e-2:
                fail(f"row {b} document {d} without the mask equals the document alone ({worst:.3g} relative): "
                     "the test could not tell the mask's absence")
            print(f"ok: row {b} document {d} without the mask differs from it alone ({worst:.3g} relative)")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario")
    for opt in ("ftrain", "prep", "convert", "logprobs", "plugin-dir", "mpirun", "workdir"):
        parser.add_argument("--" + opt, required=True)
    args = parser.parse_args()
    env = Env(args)
    scenarios = {
        "llama2_to_hf": lambda: scenario_to_hf(env, "llama2"),
        "llama3_to_hf": lambda: scenario_to_hf(env, "llama3"),
        "llama3_tied_to_hf": lambda: scenario_to_hf(env, "llama3_tied"),
        "hf_to_ftrain": lambda: scenario_hf_to_ftrain(env),
        "vit_both_ways": lambda: scenario_vit_both_ways(env),
        "lora_to_peft": lambda: scenario_lora_to_peft(env),
        "peft_to_ftrain": lambda: scenario_peft_to_ftrain(env),
        "packed_documents": lambda: scenario_packed_documents(env),
    }
    if args.scenario not in scenarios:
        fail(f"unknown scenario {args.scenario}; known: {', '.join(scenarios)}")
    scenarios[args.scenario]()
    print(f"PASS: {args.scenario}")


if __name__ == "__main__":
    main()
