// Anchors libftrain.so; the content comes from the whole-archive components.
