// ftrain-prep: turns text into ftrain token files (data/prep_cli.hpp).
#include "data/prep_cli.hpp"

int main(int argc, char** argv) { return ftrain::data::prep_main(argc, argv); }
