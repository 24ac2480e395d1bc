#!/usr/bin/env python3
"""Synthetic instruction data for ftrain-prep instruct (the tiny demos and tests).

Writes JSON lines of small string tasks a tiny byte-level model can learn:
reverse, uppercase, repeat or sort the letters of a random word. Each task has
a fixed instruction; the word is the input and the transformed word the
response, so the response is a function of the prompt and its loss can fall
close to zero, while the prompt (random letters after a fixed preamble) stays
unpredictable. Formats:

  alpaca  {"instruction": ..., "input": word, "output": answer}
  chat    {"messages": [{"role": "system", ...}, {"role": "user", ...},
                        {"role": "assistant", ...}, ...]}  (two tasks per chat)
  fields  {"prompt": "instruction: word\\n", "response": answer}

Deterministic: the same --seed gives the same bytes.

    share/scripts/make_instruct_data.py --out data/instruct.jsonl --examples 4000 --seed 1
"""
import argparse
import json
import random

TASKS = [
    ("Reverse the letters of the word.", lambda w: w[::-1]),
    ("Write the word in upper case.", lambda w: w.upper()),
    ("Repeat the word twice, separated by a space.", lambda w: w + " " + w),
    ("Sort the letters of the word alphabetically.", lambda w: "".join(sorted(w))),
]
LETTERS = "abcdefghijklmnop"


def example(rng):
    instruction, fn = rng.choice(TASKS)
    word = "".join(rng.choice(LETTERS) for _ in range(rng.randint(3, 7)))
    return instruction, word, fn(word)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--examples", type=int, default=4000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--format", choices=["alpaca", "chat", "fields"], default="alpaca")
    a = p.parse_args()
    rng = random.Random(a.seed)
    with open(a.out, "w", encoding="utf-8") as f:
        for _ in range(a.examples):
            instruction, word, answer = example(rng)
            if a.format == "alpaca":
                record = {"instruction": instruction, "input": word, "output": answer}
            elif a.format == "fields":
                record = {"prompt": f"{instruction} {word}\n", "response": answer}
            else:
                i2, w2, a2 = example(rng)
                record = {"messages": [
                    {"role": "system", "content": "You transform words."},
                    {"role": "user", "content": f"{instruction} {word}"},
                    {"role": "assistant", "content": answer},
                    {"role": "user", "content": f"{i2} {w2}"},
                    {"role": "assistant", "content": a2},
                ]}
            f.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
