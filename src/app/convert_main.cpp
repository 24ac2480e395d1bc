// ftrain-convert: consolidated HDF5 <-> Hugging Face safetensors (ckpt/convert_cli.hpp).
#include "ckpt/convert_cli.hpp"

int main(int argc, char** argv) { return ftrain::ckpt::convert_main(argc, argv); }
