// ftrain-convert's command line (the executable is src/app/convert_main.cpp;
// the conversions themselves are in convert.hpp).
//
//   ftrain-convert h5-to-safetensors IN.h5 OUTDIR [--shard-size 5GB] [--dtype f32|bf16]
//   ftrain-convert safetensors-to-h5 IN OUT.h5 [--dtype f32|bf16]
//
// Exit status 0 on success, 1 on a UserError (message on stderr), 2 on a
// usage error (message and usage on stderr).
#pragma once

namespace ftrain::ckpt {

int convert_main(int argc, char** argv);

}  // namespace ftrain::ckpt
