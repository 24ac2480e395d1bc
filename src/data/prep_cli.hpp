// ftrain-prep: the data preparation command line, as a function so that the
// executable (src/app) stays a one-line main and tests can call it.
//
//   ftrain-prep synthetic --out PATH --tokens N --vocab V --seed S
//                         [--eval-out PATH --eval-tokens N]
//                         [--successors K] [--doc-len L]
//   ftrain-prep text --out PATH (--tokenizer FILE | --tokenizer bytes |
//                                --tokenizer spm --model FILE)
//                    [--jsonl [--text-field NAME]] [--doc-per-line]
//                    [--eval-out PATH [--eval-every N]] INPUT...
//   ftrain-prep instruct --out PATH (--tokenizer spm --model FILE | --tokenizer bytes)
//                        --template fields|alpaca|chat [--prompt-field NAME]
//                        [--response-field NAME] [--messages-field NAME]
//                        [--eval-out PATH [--eval-every N]] INPUT...
//   ftrain-prep info PATH
//
// Returns the process exit code: 0 on success, 2 for a usage error, 1 when
// the work itself failed (unwritable path, corrupt file). Messages go to
// stdout, errors to stderr.
#pragma once

namespace ftrain::data {

int prep_main(int argc, char** argv);

}  // namespace ftrain::data
